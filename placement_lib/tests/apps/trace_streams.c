/* Writes through one stdio function (issue 27, reproduction 3).
 *
 *   trace_streams DIR CASE     writes DIR/CASE.dat through CASE; prints its size
 *   trace_streams list         prints every CASE, one a line
 *
 * Each case writes 300 bytes (or, for the wide ones, text whose UTF-8 form is
 * 300 bytes: "h\u00e9" is 3 bytes) into a stream fopen made, or into stdout
 * after freopen for the calls that write to stdout, then closes it - or
 * leaves it open for exit() to flush (the *_exit cases). The last cases are
 * text libc formats and writes itself (perror, psignal, warn, err, error,
 * error_at_line to stderr after freopen; putpwent, addmntent to a stream);
 * err_exit and error_exit end in exit() inside libc. Built with -O2,
 * glibc's headers inline putc_unlocked, fputc_unlocked, putchar_unlocked and
 * small constant fwrite_unlocked into stores into the stream's buffer; built
 * with -D_FORTIFY_SOURCE=2 the printf family calls the __*_chk entry points.
 * Exits 0 (error_exit: 3) when every call succeeded and the file holds what
 * was written.
 */
#define _GNU_SOURCE
#include <err.h>
#include <errno.h>
#include <error.h>
#include <limits.h>
#include <locale.h>
#include <mntent.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <wchar.h>

#define N 300
static const char line[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"; /* 50 bytes */
static const wchar_t wide[] = L"h\u00e9llo w\u00f6rld, \u00e7a va? \u20ac\u00e9t\u00e9 !"; /* UTF-8: 38 bytes */
static int bad;

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "%s failed\n", what);
        bad = 1;
    }
}

static int vfp(FILE *fp, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfprintf(fp, fmt, ap);
    va_end(ap);
    return r;
}

static int vp(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vprintf(fmt, ap);
    va_end(ap);
    return r;
}

static int vfwp(FILE *fp, const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vfwprintf(fp, fmt, ap);
    va_end(ap);
    return r;
}

static int vwp(const wchar_t *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = vwprintf(fmt, ap);
    va_end(ap);
    return r;
}

/* Wide text of exactly N UTF-8 bytes: the sentence until it would pass N, then ASCII dots. */
static size_t wide_text(wchar_t *out)
{
    size_t bytes = 0, n = 0, i = 0;
    char mb[MB_LEN_MAX];
    mbstate_t st;
    memset(&st, 0, sizeof st);
    for (;;) {
        wchar_t c = wide[i++ % (sizeof wide / sizeof *wide - 1)];
        size_t k = wcrtomb(mb, c, &st);
        if (bytes + k > N - 8)
            break;
        out[n++] = c;
        bytes += k;
    }
    while (bytes < N) {
        out[n++] = L'.';
        bytes++;
    }
    out[n] = 0;
    return n;
}

/* Each case writes N bytes to fp (stdout for the stdout cases). */
static void run(const char *name, FILE *fp)
{
    wchar_t w[N + 1];
    size_t nw = wide_text(w);
#define IS(x) (!strcmp(name, x))
#define EACH_BYTE(call)                                     \
    for (int i = 0; i < N; i++) {                           \
        int c = line[i % 50];                               \
        (void)c;                                            \
        check((call) != EOF, name);                         \
    }
    if (IS("fputc") || IS("fputc_exit")) EACH_BYTE(fputc(c, fp))
    else if (IS("putc")) EACH_BYTE(putc(c, fp))
    else if (IS("fputc_unlocked")) EACH_BYTE(fputc_unlocked(c, fp))
    else if (IS("putc_unlocked") || IS("putc_unlocked_exit")) EACH_BYTE(putc_unlocked(c, fp))
    else if (IS("putc_unlocked_flush")) {
        for (int i = 0; i < N; i++) {
            check(putc_unlocked(line[i % 50], fp) != EOF, name);
            if (i == 99)
                fflush(fp); /* what was stored so far is written here */
            if (i == 199)
                fseek(fp, 0, SEEK_CUR); /* and here */
        }
    } else if (IS("putc_unlocked_big")) {
        for (int i = 0; i < 100 * N; i++) /* 30,000 bytes: the buffer fills, __overflow flushes it */
            check(putc_unlocked(line[i % 50], fp) != EOF, name);
    } else if (IS("putchar")) EACH_BYTE(putchar(c))
    else if (IS("putchar_unlocked")) EACH_BYTE(putchar_unlocked(c))
    else if (IS("fputs")) for (int i = 0; i < 6; i++) check(fputs(line, fp) != EOF, name);
    else if (IS("fputs_unlocked")) for (int i = 0; i < 6; i++) check(fputs_unlocked(line, fp) != EOF, name);
    else if (IS("puts")) for (int i = 0; i < 6; i++) check(puts(line + 1) != EOF, name); /* 49 + newline */
    else if (IS("fwrite")) check(fwrite(line, 50, 6, fp) == 6, name);
    else if (IS("fwrite_unlocked")) for (int i = 0; i < 6; i++) check(fwrite_unlocked(line, 1, 50, fp) == 50, name);
    else if (IS("fwrite_unlocked_small")) for (int i = 0; i < N / 4; i++) check(fwrite_unlocked("abcd", 4, 1, fp) == 1, name);
    else if (IS("putw")) for (int i = 0; i < N / 4; i++) check(putw(0x61626364, fp) == 0, name);
    else if (IS("fprintf")) for (int i = 0; i < 6; i++) check(fprintf(fp, "%s", line) == 50, name);
    else if (IS("vfprintf")) for (int i = 0; i < 6; i++) check(vfp(fp, "%.25s%s", line, line + 25) == 50, name);
    else if (IS("printf")) for (int i = 0; i < 6; i++) check(printf("%s", line) == 50, name);
    else if (IS("vprintf")) for (int i = 0; i < 6; i++) check(vp("%s", line) == 50, name);
    else if (IS("fputwc")) for (size_t i = 0; i < nw; i++) check(fputwc(w[i], fp) != WEOF, name);
    else if (IS("putwc")) for (size_t i = 0; i < nw; i++) check(putwc(w[i], fp) != WEOF, name);
    else if (IS("fputwc_unlocked")) for (size_t i = 0; i < nw; i++) check(fputwc_unlocked(w[i], fp) != WEOF, name);
    else if (IS("putwc_unlocked")) for (size_t i = 0; i < nw; i++) check(putwc_unlocked(w[i], fp) != WEOF, name);
    else if (IS("putwchar")) for (size_t i = 0; i < nw; i++) check(putwchar(w[i]) != WEOF, name);
    else if (IS("putwchar_unlocked")) for (size_t i = 0; i < nw; i++) check(putwchar_unlocked(w[i]) != WEOF, name);
    else if (IS("fputws") || IS("fputws_exit")) check(fputws(w, fp) >= 0, name);
    else if (IS("fputws_unlocked")) check(fputws_unlocked(w, fp) >= 0, name);
    else if (IS("fwprintf")) check(fwprintf(fp, L"%ls", w) == (int)nw, name);
    else if (IS("vfwprintf")) check(vfwp(fp, L"%lc%ls", w[0], w + 1) == (int)nw, name);
    else if (IS("wprintf")) check(wprintf(L"%ls", w) == (int)nw, name);
    else if (IS("vwprintf")) check(vwp(L"%ls", w) == (int)nw, name);
    /* what libc formats and writes itself: to stderr, or to the stream given */
    else if (IS("perror")) for (int i = 0; i < 10; i++) { errno = ENOENT; perror("trace_streams"); }
    else if (IS("psignal")) for (int i = 0; i < 10; i++) psignal(SIGINT, "trace_streams");
    else if (IS("warn")) for (int i = 0; i < 10; i++) { errno = EACCES; warn("%s %d", "warning", i); }
    else if (IS("warnx")) for (int i = 0; i < 10; i++) warnx("%s %d %.3f", "warning", i, i / 7.0);
    else if (IS("error")) for (int i = 0; i < 10; i++) error(0, ENOENT, "%s %d %.2f %s", "error", i, i / 3.0, line);
    else if (IS("error_at_line")) for (int i = 0; i < 10; i++) error_at_line(0, 0, "file.c", 40 + i, "%s %.1f", line, 2.5);
    else if (IS("err_exit")) { errno = EPERM; err(0, "%s %d", "leaving", 42); }
    else if (IS("error_exit")) error(0 + 3, EIO, "%s %.4f", "leaving", 0.5);
    else if (IS("putpwent")) {
        struct passwd pw = { "user", "x", 1000, 1000, "A User", "/home/user", "/bin/sh" };
        for (int i = 0; i < 10; i++)
            check(putpwent(&pw, fp) == 0, name);
    } else if (IS("addmntent")) {
        struct mntent m = { "/dev/sda1", "/mnt/data", "ext4", "rw,noatime", 0, 2 };
        for (int i = 0; i < 10; i++)
            check(addmntent(fp, &m) == 0, name);
    } else {
        fprintf(stderr, "unknown case %s\n", name);
        exit(2);
    }
}

static const char *const cases[] = {
    "fputc", "fputc_exit", "putc", "fputc_unlocked", "putc_unlocked", "putc_unlocked_exit", "putc_unlocked_flush",
    "putc_unlocked_big", "putchar", "putchar_unlocked", "fputs", "fputs_unlocked", "puts", "fwrite",
    "fwrite_unlocked", "fwrite_unlocked_small", "putw", "fprintf", "vfprintf", "printf", "vprintf", "fputwc",
    "putwc", "fputwc_unlocked", "putwc_unlocked", "putwchar", "putwchar_unlocked", "fputws", "fputws_exit",
    "fputws_unlocked", "fwprintf", "vfwprintf", "wprintf", "vwprintf", "perror", "psignal", "warn", "warnx", "error",
    "error_at_line", "err_exit", "error_exit", "putpwent", "addmntent", NULL,
};

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "list")) {
        for (const char *const *c = cases; *c; c++)
            puts(*c);
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: trace_streams DIR CASE | trace_streams list\n");
        return 2;
    }
    if (!setlocale(LC_ALL, "C.UTF-8")) {
        fprintf(stderr, "no C.UTF-8 locale\n");
        return 2;
    }
    const char *name = argv[2];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.dat", argv[1], name);
    static const char *const on_stdout[] = { "putchar", "putchar_unlocked", "puts", "printf", "vprintf",
                                             "putwchar", "putwchar_unlocked", "wprintf", "vwprintf", NULL };
    int to_stdout = 0;
    for (const char *const *c = on_stdout; *c; c++)
        to_stdout |= !strcmp(name, *c);
    static const char *const on_stderr[] = { "perror", "psignal", "warn", "warnx", "error", "error_at_line",
                                             "err_exit", "error_exit", NULL };
    int to_stderr = 0;
    for (const char *const *c = on_stderr; *c; c++)
        to_stderr |= !strcmp(name, *c);
    FILE *fp = to_stdout ? freopen(path, "w", stdout) : to_stderr ? freopen(path, "w", stderr) : fopen(path, "w");
    if (!fp) {
        perror(path);
        return 1;
    }
    run(name, fp);
    if (strstr(name, "_exit"))
        return bad; /* exit() flushes the stream, after libiez has written the trace */
    check(fclose(fp) == 0, "fclose");
    struct stat st;
    long expect = !strcmp(name, "putc_unlocked_big") ? 100 * N : N;
    if (to_stderr || !strcmp(name, "putpwent") || !strcmp(name, "addmntent"))
        expect = -1; /* libc's own text: whatever its length */
    check(stat(path, &st) == 0 && (expect < 0 ? st.st_size > 0 : st.st_size == expect), "size");
    return bad;
}
