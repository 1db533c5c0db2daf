/* Many small files, for the memory and time of tracing's per-file state.
 *
 *   trace_many DIR N [BYTES]
 *
 * Creates DIR/d0000/f0000000 .. DIR/d<N/1000>/f<N-1> one after the other,
 * 1,000 per directory so that the file system's cost per file stays the same
 * however large N is: open(O_CREAT | O_WRONLY | O_TRUNC), write BYTES bytes
 * (default 1), close. Prints one line "files N seconds S peak_rss_kib K": the
 * loop's wall time and the peak resident set of the program's own image
 * (VmHWM in /proc/self/status; getrusage's ru_maxrss also holds the image
 * before exec, the launcher's), so a traced run can be compared with the
 * plain one. Exits 1 with the failing call on stderr.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long peak_rss_kib(void)
{
    FILE *fp = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
            break;
    if (fp)
        fclose(fp);
    return kib;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: trace_many DIR N [BYTES]\n");
        return 2;
    }
    long n = atol(argv[2]);
    size_t bytes = argc > 3 ? (size_t)atol(argv[3]) : 1;
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return 1;
    memset(buf, 'x', bytes);
    char path[4096];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
        if (i % 1000 == 0) {
            snprintf(path, sizeof path, "%s/d%04ld", argv[1], i / 1000);
            if (mkdir(path, 0755) != 0) {
                perror(path);
                return 1;
            }
        }
        snprintf(path, sizeof path, "%s/d%04ld/f%07ld", argv[1], i / 1000, i);
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        if (bytes && write(fd, buf, bytes) != (ssize_t)bytes) {
            perror("write");
            return 1;
        }
        if (close(fd) != 0) {
            perror("close");
            return 1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long rss = peak_rss_kib();
    if (rss < 0) {
        fprintf(stderr, "no VmHWM in /proc/self/status\n");
        return 1;
    }
    printf("files %ld seconds %.3f peak_rss_kib %ld\n", n,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, rss);
    free(buf);
    return 0;
}
