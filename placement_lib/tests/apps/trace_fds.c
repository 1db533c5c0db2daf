/* Known byte counts written through descriptor copies and the stdio family,
 * for tracing's accounting (tests/placement_lib/test_trace_accounting.py).
 *
 *   trace_fds DIR
 *
 * Every file below ends with exactly the bytes written to it, so its size is
 * the ground truth for its bytes_written:
 *
 *   dup.dat          write 100, dup, 200 through the copy, close the original, 300 more through the copy: 600
 *   dupfd.dat        10 + 20 + 30 through fd, fcntl(F_DUPFD, 100) and fcntl(F_DUPFD_CLOEXEC, 200): 60
 *   dup2_old.dat     10 through its fd, then 50 through the descriptor dup2 put it on: 60
 *   dup2_new.dat     70 before dup2 replaced its descriptor: 70
 *   dup3.dat         5 + 25 (through dup3's copy, O_CLOEXEC): 30
 *   dup3_victim.dat  40 before dup3 replaced its descriptor: 40
 *   pipe_over.dat    5, then dup2 puts a pipe on its descriptor and 1000 bytes go to the pipe: 5
 *   close_range.dat  7, close_range closes it, memfd_create takes its number, 1000 bytes go to the memfd: 7
 *   closefrom.dat    9, closefrom closes it, memfd_create takes its number, 1000 to the memfd: 9
 *   splice.dat       300 spliced from a pipe, then 44 spliced from it into another pipe: 300
 *   stdio.dat        fprintf 5 + vfprintf 10 + fputc 1 + putc 1 + fputs 13 + fwrite_unlocked 20 +
 *                    fputs_unlocked 7 + fputc_unlocked 1 + putc_unlocked 1 + putw 4 + fwrite 100 +
 *                    fprintf of a constant (gcc makes it fputc/fwrite) 1 + 3: 167
 *   dprintf.dat      dprintf "12345\n" + vdprintf "abc": 9
 *   stdout.dat       dup2'd onto stdout: printf 8 + vprintf 4 + puts 4 + putchar 1: 17
 *   freopen_a.dat    fprintf 100, then its stream is freopen'd to freopen_b.dat: 100
 *   freopen_b.dat    fprintf 200, freopen(NULL, "a") of the same stream, fputs 50: 250
 *   fdopen_open.dat  fdopen of its descriptor, fputs 33, left open for exit() to flush: 33
 *   stdout_freopen.dat  freopen(..., "w", stdout), then printf 20 (last: stdout stays there): 20
 *
 * Prints "done" on the real stdout before the last step; exits 1 naming the failing call.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *dir;
static char buf[4096];

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "trace_fds: line %d: %s failed\n", __LINE__, #cond); \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static const char *at(const char *name)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

static int create(const char *name)
{
    int fd = open(at(name), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0);
    return fd;
}

static void put(int fd, size_t n)
{
    CHECK(write(fd, buf, n) == (ssize_t)n);
}

static int call_vfprintf(FILE *fp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(fp, fmt, ap);
    va_end(ap);
    return r;
}

static int call_vprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vprintf(fmt, ap);
    va_end(ap);
    return r;
}

static int call_vdprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vdprintf(fd, fmt, ap);
    va_end(ap);
    return r;
}

/* A descriptor closed by close_range/closefrom gets its number reused by a call iez does not interpose. */
static void reuse_by_memfd(int expected_fd)
{
    int m = memfd_create("trace_fds", 0);
    CHECK(m == expected_fd);
    put(m, 1000);
    CHECK(close(m) == 0);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    dir = argv[1];
    memset(buf, 'x', sizeof buf);

    /* copies: the record follows every copy, and survives the original's close */
    int fd = create("dup.dat");
    put(fd, 100);
    int d = dup(fd);
    CHECK(d >= 0);
    put(d, 200);
    CHECK(close(fd) == 0);
    put(d, 300);
    CHECK(close(d) == 0);

    fd = create("dupfd.dat");
    int d1 = fcntl(fd, F_DUPFD, 100), d2 = fcntl(fd, F_DUPFD_CLOEXEC, 200);
    CHECK(d1 >= 100 && d2 >= 200);
    put(fd, 10);
    put(d1, 20);
    put(d2, 30);
    CHECK(close(fd) == 0 && close(d1) == 0 && close(d2) == 0);

    /* dup2 over a traced descriptor: its file is let go, later bytes are the new file's */
    int a = create("dup2_old.dat"), b = create("dup2_new.dat");
    put(b, 70);
    put(a, 10);
    CHECK(dup2(a, b) == b);
    put(b, 50);
    CHECK(close(a) == 0 && close(b) == 0);

    a = create("dup3.dat");
    b = create("dup3_victim.dat");
    put(b, 40);
    CHECK(dup3(a, b, O_CLOEXEC) == b);
    put(a, 5);
    put(b, 25);
    CHECK(close(a) == 0 && close(b) == 0);

    /* a pipe put on a traced descriptor: what goes to the pipe is no file's */
    a = create("pipe_over.dat");
    put(a, 5);
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(dup2(p[1], a) == a);
    put(a, 1000);
    CHECK(read(p[0], buf, sizeof buf) == 1000);
    memset(buf, 'x', sizeof buf);
    CHECK(close(a) == 0 && close(p[0]) == 0 && close(p[1]) == 0);

    /* closed behind open/close's back */
    a = create("close_range.dat");
    put(a, 7);
    CHECK(close_range((unsigned)a, (unsigned)a, 0) == 0);
    reuse_by_memfd(a);

    a = create("closefrom.dat");
    put(a, 9);
    closefrom(a);
    reuse_by_memfd(a);

    /* splice: into the file counts, out of it does not */
    fd = open(at("splice.dat"), O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(pipe(p) == 0);
    put(p[1], 300);
    CHECK(splice(p[0], NULL, fd, NULL, 300, 0) == 300);
    loff_t from = 0;
    CHECK(splice(fd, &from, p[1], NULL, 44, 0) == 44);
    CHECK(read(p[0], buf, sizeof buf) == 44);
    memset(buf, 'x', sizeof buf);
    CHECK(close(fd) == 0 && close(p[0]) == 0 && close(p[1]) == 0);

    /* the stdio family */
    FILE *fp = fopen(at("stdio.dat"), "w");
    CHECK(fp);
    CHECK(fprintf(fp, "%05d", 42) == 5);
    CHECK(call_vfprintf(fp, "%10s", "v") == 10);
    CHECK(fputc('c', fp) == 'c');
    CHECK(putc('p', fp) == 'p');
    CHECK(fputs("thirteen char", fp) >= 0);
    CHECK(fwrite_unlocked(buf, 4, 5, fp) == 5);
    CHECK(fputs_unlocked("seven..", fp) >= 0);
    /* through pointers: with optimisation glibc's headers would inline these into the program */
    int (*volatile fputc_u)(int, FILE *) = fputc_unlocked;
    int (*volatile putc_u)(int, FILE *) = putc_unlocked;
    CHECK(fputc_u('u', fp) == 'u');
    CHECK(putc_u('u', fp) == 'u');
    CHECK(putw(0x41424344, fp) == 0);
    CHECK(fwrite(buf, 1, 100, fp) == 100);
    fprintf(fp, "x");
    fprintf(fp, "abc");
    CHECK(fclose(fp) == 0);

    fd = create("dprintf.dat");
    CHECK(dprintf(fd, "%d\n", 12345) == 6);
    CHECK(call_vdprintf(fd, "%s", "abc") == 3);
    CHECK(close(fd) == 0);

    /* stdout put on a file: printf and friends count for it */
    CHECK(fflush(stdout) == 0);
    int saved = dup(1);
    CHECK(saved >= 0);
    fd = create("stdout.dat");
    CHECK(dup2(fd, 1) == 1 && close(fd) == 0);
    CHECK(printf("hello %d\n", 1) == 8);
    CHECK(call_vprintf("%4d", 7) == 4);
    CHECK(puts("abc") >= 0);
    CHECK(putchar('!') == '!');
    CHECK(fflush(stdout) == 0);
    CHECK(dup2(saved, 1) == 1 && close(saved) == 0);

    /* freopen: the old file is let go, the new one counted; a NULL path keeps the same file */
    fp = fopen(at("freopen_a.dat"), "w");
    CHECK(fp);
    CHECK(fwrite(buf, 1, 100, fp) == 100);
    fp = freopen(at("freopen_b.dat"), "w", fp);
    CHECK(fp);
    CHECK(fprintf(fp, "%200s", "b") == 200);
    fp = freopen(NULL, "a", fp);
    CHECK(fp);
    CHECK(fputs("fifty.............................................", fp) >= 0);
    CHECK(fclose(fp) == 0);

    fd = create("fdopen_open.dat");
    fp = fdopen(fd, "w");
    CHECK(fp);
    CHECK(fputs("thirty-three bytes, left in a buf", fp) >= 0);

    printf("done\n");
    CHECK(fflush(stdout) == 0);
    CHECK(freopen(at("stdout_freopen.dat"), "w", stdout) == stdout);
    CHECK(printf("%20s", "twenty") == 20);
    return 0;
}
