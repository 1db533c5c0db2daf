/* Creates files from a SIGALRM handler while the program allocates (issue 14, reproduction 2).
 *
 *   signal_create DIR NFILES NTHREADS
 *
 * open() is async-signal-safe, so a handler may call it whatever the thread it
 * interrupted was doing - here, most of the time, malloc or free. An interval
 * timer fires every 300 us; its handler creates DIR/s.<k> (k = 0 .. NFILES-1)
 * with open(O_CREAT|O_WRONLY, 0644) and closes it. The main thread and
 * NTHREADS-1 more threads allocate and free blocks of varied sizes until the
 * handler has made NFILES files (at most 60 s).
 *
 * The program defines malloc, calloc, realloc and free itself (forwarding to
 * glibc's) and counts the calls made while the handler is inside open(): a
 * library that allocates there is caught even when no signal happens to land
 * inside malloc. It prints "created <N> allocations_in_handler <A>" and exits
 * 0 when N == NFILES; 1 otherwise.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static __thread volatile sig_atomic_t in_handler; /* the handler runs on the main thread only */
static volatile long allocations_in_handler;

void *malloc(size_t n)
{
    if (in_handler)
        allocations_in_handler++;
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    if (in_handler)
        allocations_in_handler++;
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    if (in_handler)
        allocations_in_handler++;
    return __libc_realloc(p, n);
}

void free(void *p)
{
    if (in_handler && p)
        allocations_in_handler++;
    __libc_free(p);
}

static char **paths;
static int nfiles;
static volatile int made;

static void on_alarm(int sig)
{
    (void)sig;
    if (made >= nfiles)
        return;
    in_handler = 1;
    int fd = open(paths[made], O_CREAT | O_WRONLY, 0644);
    in_handler = 0;
    if (fd >= 0) {
        close(fd);
        made++;
    }
}

static time_t give_up;

static void churn(unsigned seed)
{
    void *blocks[64] = { 0 };
    for (unsigned long k = 0; made < nfiles; k++) {
        if (k % 4096 == 0 && time(NULL) > give_up)
            break;
        seed = seed * 1103515245u + 12345u;
        unsigned i = (seed >> 8) % 64;
        free(blocks[i]);
        size_t size = 16 + (seed >> 12) % 4096;
        blocks[i] = malloc(size);
        if (blocks[i])
            memset(blocks[i], (int)i, size < 64 ? size : 64);
    }
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
}

static void *churner(void *arg)
{
    /* the timer's signal goes to the main thread only */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    churn((unsigned)(long)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: signal_create DIR NFILES NTHREADS\n");
        return 2;
    }
    nfiles = atoi(argv[2]);
    give_up = time(NULL) + 60;
    int nthreads = atoi(argv[3]);
    paths = calloc((size_t)nfiles, sizeof *paths);
    for (int i = 0; i < nfiles; i++) {
        paths[i] = malloc(strlen(argv[1]) + 32);
        sprintf(paths[i], "%s/s.%d", argv[1], i);
    }
    pthread_t *threads = calloc((size_t)(nthreads > 1 ? nthreads : 1), sizeof *threads);
    /* the churners are born with SIGALRM blocked: a thread that had not yet blocked it when the
     * timer started could run the handler beside the main thread's (two creates of one index) */
    sigset_t alarm_set;
    sigemptyset(&alarm_set);
    sigaddset(&alarm_set, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alarm_set, NULL);
    for (int t = 1; t < nthreads; t++)
        pthread_create(&threads[t], NULL, churner, (void *)(long)(t * 7919));
    pthread_sigmask(SIG_UNBLOCK, &alarm_set, NULL);
    app_alarm_every(on_alarm, 300);
    churn(12345u);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    int created = made;
    made = nfiles; /* stops the other threads (and the handler) */
    for (int t = 1; t < nthreads; t++)
        pthread_join(threads[t], NULL);
    printf("created %d allocations_in_handler %ld\n", created, allocations_in_handler);
    return created == nfiles ? 0 : 1;
}
