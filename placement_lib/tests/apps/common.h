/* Helpers the test programs share: static inline, so each program still compiles alone from its one
 * file (the quoted include is found beside the program's source, whatever the compiler's -I). */
#ifndef IEZ_APPS_COMMON_H
#define IEZ_APPS_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC seconds. */
static inline double app_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

enum { APP_OK, APP_OPEN, APP_WRITE, APP_CLOSE };

/* open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644), write the n bytes of buf, close: APP_OK, or the step
 * that failed with its errno. A failed open is printed ("open PATH: ERROR" on stderr); the caller
 * says the rest. The descriptor is closed whatever failed. */
static inline int app_create(const char *path, const void *buf, size_t n)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        return APP_OPEN;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const char *)buf + done, n - done);
        if (w <= 0) {
            int err = errno;
            close(fd);
            errno = err;
            return APP_WRITE;
        }
        done += (size_t)w;
    }
    return close(fd) != 0 ? APP_CLOSE : APP_OK;
}

/* The barrier app_threads' threads wait on when they want to start together. */
static inline pthread_barrier_t *app_barrier(void)
{
    static pthread_barrier_t start;
    return &start;
}

/* Starts n threads running fn((void *)i) for i < n, each on a stack of `stack` bytes (0: the default),
 * app_barrier() set for n, and joins them: how many returned something else than NULL, or -1 when
 * thread i could not start ("pthread_create i failed" on stderr; the others are not joined). */
static inline long app_threads(long n, void *(*fn)(void *), size_t stack)
{
    pthread_t *tids = calloc((size_t)(n > 0 ? n : 1), sizeof *tids);
    if (!tids)
        return -1;
    pthread_barrier_init(app_barrier(), NULL, (unsigned)n);
    for (long i = 0; i < n; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        int rc = stack ? pthread_attr_setstacksize(&attr, stack) : 0;
        if (!rc)
            rc = pthread_create(&tids[i], &attr, fn, (void *)i);
        pthread_attr_destroy(&attr);
        if (rc) {
            fprintf(stderr, "pthread_create %ld failed\n", i);
            return -1;
        }
    }
    long failed = 0;
    for (long i = 0; i < n; i++) {
        void *r;
        pthread_join(tids[i], &r);
        failed += r != NULL;
    }
    free(tids);
    return failed;
}

/* SIGALRM to handler every usec microseconds (SA_RESTART: the program's own calls go on). */
static inline void app_alarm_every(void (*handler)(int), long usec)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = { { 0, usec }, { 0, usec } };
    setitimer(ITIMER_REAL, &every, NULL);
}

#endif
