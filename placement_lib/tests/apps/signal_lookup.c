/* Creates files from a SIGALRM handler while the main thread creates files too, so that the handler
 * often interrupts the library in the middle of a main-thread create's DB lookup.
 *
 *   signal_lookup DIR NFILES
 *
 * An interval timer fires every 2 ms; its handler creates DIR/s.<k> (k = 0 .. NFILES-1) with
 * open(O_CREAT|O_WRONLY, 0644) and closes it. The main thread creates DIR/m.<i> the same way, one
 * after another, and allocates nothing, until the handler has made NFILES files (at most 60 s): a
 * handler that lands in the main thread's create lands in libiez (its lookup, the DB client, the DB
 * client's malloc), never in the application's own malloc. Prints "created <N>" and exits 0 when
 * N == NFILES; 1 otherwise. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static char dir[3000];
static volatile sig_atomic_t made;
static long nfiles;

/* path = dir + "/" + prefix + k, with async-signal-safe code only */
static void name(char *out, const char *prefix, long k)
{
    size_t n = strlen(dir);
    memcpy(out, dir, n);
    out[n++] = '/';
    for (const char *p = prefix; *p; p++)
        out[n++] = *p;
    char digits[24];
    int d = 0;
    do {
        digits[d++] = (char)('0' + k % 10);
        k /= 10;
    } while (k);
    while (d)
        out[n++] = digits[--d];
    out[n] = '\0';
}

static void on_alarm(int sig)
{
    (void)sig;
    if (made >= nfiles)
        return;
    int saved = errno;
    char path[3100];
    name(path, "s.", made);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0) {
        close(fd);
        made++;
    }
    errno = saved;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: signal_lookup DIR NFILES\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    nfiles = atol(argv[2]);
    app_alarm_every(on_alarm, 2000);
    time_t until = time(NULL) + 60;
    char path[3100];
    for (long i = 0; made < nfiles && time(NULL) < until; i++) {
        name(path, "m.", i);
        int fd = open(path, O_CREAT | O_WRONLY, 0644);
        if (fd >= 0)
            close(fd);
    }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    printf("created %ld\n", (long)made);
    return made == nfiles ? 0 : 1;
}
