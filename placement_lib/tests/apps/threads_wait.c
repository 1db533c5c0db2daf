/* How long each of many concurrent creates waits (issue 14, reproduction 7).
 *
 *   threads_wait DIR NTHREADS
 *
 * NTHREADS threads wait on one barrier, then each creates DIR/t.<i> with
 * open(O_CREAT|O_WRONLY|O_TRUNC, 0644) and measures that call. Prints
 * "created <N>" on stdout and "slowest create <MS> ms" on stderr; exit status
 * 0 when every create succeeded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static const char *dir;
static double *took;

static void *worker(void *arg)
{
    long i = (long)arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/t.%ld", dir, i);
    pthread_barrier_wait(app_barrier());
    double t = app_now();
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    took[i] = app_now() - t;
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        return (void *)1;
    }
    close(fd);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: threads_wait DIR NTHREADS\n");
        return 2;
    }
    dir = argv[1];
    long n = atol(argv[2]);
    took = calloc((size_t)n, sizeof *took);
    long failed = app_threads(n, worker, 0);
    if (failed < 0)
        return 1;
    long ok = n - failed;
    double slowest = 0;
    for (long i = 0; i < n; i++)
        if (took[i] > slowest)
            slowest = took[i];
    printf("created %ld\n", ok);
    fprintf(stderr, "slowest create %.0f ms\n", slowest * 1000.0);
    return ok == n ? 0 : 1;
}
