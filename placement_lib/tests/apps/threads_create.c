/* Concurrent creates for the placement tests.
 *
 *   threads_create DIR NTHREADS BYTES
 *
 * Starts NTHREADS threads that wait on one barrier, then each
 * open(DIR/t.<i>, O_CREAT|O_WRONLY|O_TRUNC, 0644) its own file and writes
 * BYTES bytes of the byte (i % 251). Prints "created N" and exits 0 when every
 * thread succeeded; otherwise prints each failure on stderr and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static const char *dir;
static size_t bytes;

static void *worker(void *arg)
{
    long i = (long)arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/t.%ld", dir, i);
    char *buf = malloc(bytes ? bytes : 1);
    memset(buf, (int)(i % 251), bytes);
    pthread_barrier_wait(app_barrier());
    int rc = app_create(path, buf, bytes);
    free(buf);
    if (rc == APP_WRITE || rc == APP_CLOSE)
        fprintf(stderr, "%s %s: %s\n", rc == APP_WRITE ? "write" : "close", path, strerror(errno));
    return rc == APP_OK ? NULL : (void *)1;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: threads_create DIR NTHREADS BYTES\n");
        return 2;
    }
    dir = argv[1];
    long n = strtol(argv[2], NULL, 10);
    bytes = (size_t)strtoull(argv[3], NULL, 10);
    if (n < 1 || n > 4096)
        return 2;
    if (app_threads(n, worker, 64 * 1024) != 0) /* small stacks, as many runtimes use */
        return 1;
    printf("created %ld\n", n);
    return 0;
}
