/* Threads creating many files at once, for tracing's per-file state under
 * concurrency (tests/placement_lib/test_trace_accounting.py).
 *
 *   trace_threads DIR NTHREADS FILES
 *
 * Thread t creates DIR/t<t>.<i> for i < FILES and writes 1 + (i % 7) bytes
 * to each through write on a dup'd descriptor, then i % 5 bytes through a
 * stdio stream on another copy (fdopen of dup), then closes both; every
 * thread also appends one byte per file to its own DIR/log.<t>, held open
 * the whole time. Each file's size is what was written to it. Exits 1 naming
 * the failing call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static const char *dir;
static long files;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "trace_threads: line %d: %s failed\n", __LINE__, #cond); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

static void *worker(void *arg)
{
    long t = (long)arg;
    char path[4096], buf[16];
    memset(buf, 'x', sizeof buf);
    snprintf(path, sizeof path, "%s/log.%ld", dir, t);
    int log = open(path, O_CREAT | O_WRONLY | O_APPEND, 0644);
    CHECK(log >= 0);
    pthread_barrier_wait(app_barrier());
    for (long i = 0; i < files; i++) {
        snprintf(path, sizeof path, "%s/t%ld.%ld", dir, t, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0);
        int copy = dup(fd);
        CHECK(copy >= 0);
        CHECK(close(fd) == 0);
        CHECK(write(copy, buf, (size_t)(1 + i % 7)) == 1 + i % 7);
        FILE *fp = fdopen(dup(copy), "a");
        CHECK(fp);
        for (long k = 0; k < i % 5; k++)
            CHECK(fputc('s', fp) == 's');
        CHECK(fclose(fp) == 0);
        CHECK(close(copy) == 0);
        CHECK(write(log, "l", 1) == 1);
    }
    CHECK(close(log) == 0);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    dir = argv[1];
    long n = atol(argv[2]);
    files = atol(argv[3]);
    CHECK(app_threads(n, worker, 0) == 0);
    return 0;
}
