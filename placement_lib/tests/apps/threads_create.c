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

static const char *dir;
static size_t bytes;
static pthread_barrier_t start;

static void *worker(void *arg)
{
    long i = (long)arg;
    char path[4096];
    snprintf(path, sizeof path, "%s/t.%ld", dir, i);
    char *buf = malloc(bytes ? bytes : 1);
    memset(buf, (int)(i % 251), bytes);
    pthread_barrier_wait(&start);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0) {
        fprintf(stderr, "open %s: %s\n", path, strerror(errno));
        free(buf);
        return (void *)1;
    }
    size_t done = 0;
    while (done < bytes) {
        ssize_t w = write(fd, buf + done, bytes - done);
        if (w <= 0) {
            fprintf(stderr, "write %s: %s\n", path, strerror(errno));
            close(fd);
            free(buf);
            return (void *)1;
        }
        done += (size_t)w;
    }
    free(buf);
    if (close(fd) != 0) {
        fprintf(stderr, "close %s: %s\n", path, strerror(errno));
        return (void *)1;
    }
    return NULL;
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
    pthread_t *tids = calloc((size_t)n, sizeof *tids);
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (long i = 0; i < n; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024); /* small stacks, as many runtimes use */
        if (pthread_create(&tids[i], &attr, worker, (void *)i) != 0) {
            fprintf(stderr, "pthread_create %ld failed\n", i);
            return 1;
        }
        pthread_attr_destroy(&attr);
    }
    int failed = 0;
    for (long i = 0; i < n; i++) {
        void *r;
        pthread_join(tids[i], &r);
        failed |= r != NULL;
    }
    free(tids);
    if (failed)
        return 1;
    printf("created %ld\n", n);
    return 0;
}
