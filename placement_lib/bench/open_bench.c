/* Times one kind of call N times and prints each latency in nanoseconds, one
 * per line, so the driver (benchmarks/preload_latency.py) can compare the same
 * program with and without libiez preloaded.
 *
 *   open_bench open-existing FILE N       open(FILE, O_RDONLY) + close
 *   open_bench create DIR PREFIX N        open(DIR/PREFIX.<i>, O_CREAT|O_WRONLY) + close, new files
 *   open_bench create-layout DIR PREFIX N TEXT   the same, timing the open and an fsetxattr of TEXT
 *                                         as user.iez.layout on it: what recording a layout by hand costs
 *   open_bench write FILE MIB BLOCK       write MIB MiB in BLOCK-byte writes (prints total ns)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/xattr.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "open-existing")) {
        int n = atoi(argv[3]);
        for (int i = 0; i < n; i++) {
            long long t = now_ns();
            int fd = open(argv[2], O_RDONLY);
            long long d = now_ns() - t;
            if (fd < 0) { perror(argv[2]); return 1; }
            close(fd);
            printf("%lld\n", d);
        }
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "create")) {
        int n = atoi(argv[4]);
        char path[4096];
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s.%d", argv[2], argv[3], i);
            long long t = now_ns();
            int fd = open(path, O_CREAT | O_WRONLY, 0644);
            long long d = now_ns() - t;
            if (fd < 0) { perror(path); return 1; }
            close(fd);
            printf("%lld\n", d);
        }
        return 0;
    }
    if (argc >= 6 && !strcmp(argv[1], "create-layout")) {
        int n = atoi(argv[4]);
        size_t len = strlen(argv[5]);
        char path[4096];
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s.%d", argv[2], argv[3], i);
            long long t = now_ns();
            int fd = open(path, O_CREAT | O_WRONLY, 0644);
            int rc = fd >= 0 ? fsetxattr(fd, "user.iez.layout", argv[5], len, 0) : -1;
            long long d = now_ns() - t;
            if (fd < 0 || rc != 0) { perror(path); return 1; }
            close(fd);
            printf("%lld\n", d);
        }
        return 0;
    }
    if (argc >= 5 && !strcmp(argv[1], "write")) {
        long long mib = atoll(argv[3]);
        size_t block = (size_t)atoll(argv[4]);
        char *buf = calloc(1, block);
        long long t = now_ns();
        int fd = open(argv[2], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || !buf) { perror(argv[2]); return 1; }
        long long total = mib << 20;
        for (long long done = 0; done < total; done += (long long)block)
            if (write(fd, buf, block) != (ssize_t)block) { perror("write"); return 1; }
        close(fd);
        printf("%lld\n", now_ns() - t);
        free(buf);
        return 0;
    }
    fprintf(stderr, "usage: open_bench open-existing FILE N | create DIR PREFIX N | create-layout DIR PREFIX N TEXT | "
                    "write FILE MIB BLOCK\n");
    return 2;
}
