/* Tracing's count of what programs write through stdio streams (README "What
 * tracing counts").
 *
 * glibc's stdio writes its buffers with an internal call no preload library
 * sees, so bytes are counted where they enter a stream:
 * - every stdio call that writes - narrow and wide, locking and _unlocked, the
 *   printf family and its _FORTIFY_SOURCE __*_chk entry points, glibc's _IO_*
 *   names - is interposed and counts what it accepted when it returns; wide
 *   characters count their multibyte length in the locale, which is what the
 *   stream writes;
 * - what a program stores in a stream's buffer without any call (glibc's
 *   headers inline putc_unlocked, fputc_unlocked, putchar_unlocked and
 *   fwrite_unlocked of a few constant bytes into optimised programs, which
 *   call __overflow only when the buffer is full) is read off the buffer:
 *   libiez notes the stream's write pointer after each call it sees, and at
 *   the next one (a write, __overflow, fflush, a seek, setvbuf, fclose,
 *   freopen, exit) counts how far the pointer moved meanwhile.
 * Each interposer makes exactly one real call, whose result and errno the
 * application sees; when not tracing, the only cost is one load. */
#undef _FORTIFY_SOURCE /* these are the functions the fortified headers would wrap */
#include "real.h"

#include <errno.h>
#include <grp.h>
#include <gshadow.h>
#include <limits.h>
#include <mntent.h>
#include <pwd.h>
#include <shadow.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
#include <sys/single_threaded.h>
#define SINGLE_THREADED() __libc_single_threaded
#else
#define SINGLE_THREADED() 0
#endif


static inline int tracing_table(void)
{
    return __builtin_expect(__atomic_load_n(&iez_fd_records, __ATOMIC_RELAXED) != 0, 0);
}

/* The record of fp's descriptor when it is traced, else NULL. */
static inline struct iez_record_bytes *stream_record(FILE *fp)
{
    void **table = __atomic_load_n(&iez_fd_records, __ATOMIC_ACQUIRE);
    int fd = fp->_fileno; /* fileno() without its call and its lock */
    if (!table || (size_t)(unsigned)fd >= iez_fd_records_len || iez_in_mpi_write || iez_busy)
        return NULL;
    return __atomic_load_n(&table[fd], __ATOMIC_ACQUIRE);
}

/* A process that never started a thread adds with one plain instruction (a signal handler runs
 * between instructions, never inside one): the locked add costs more than a whole fputc. */
static inline void add(struct iez_record_bytes *r, long n)
{
    if (n <= 0)
        return;
#ifdef __x86_64__
    if (SINGLE_THREADED()) {
        __asm__ volatile("addq %1, %0" : "+m"(r->bytes) : "r"((uint64_t)n));
        return;
    }
#endif
    __atomic_add_fetch(&r->bytes, (uint64_t)n, __ATOMIC_RELAXED);
}

/* Before a call on fp: counts what the program stored in fp's buffer since libiez's last look - from
 * the pointer noted then, or from the buffer's start when it was emptied since (or never seen). */
void iez_trace_stream_look(FILE *fp)
{
    struct iez_record_bytes *r = fp ? stream_record(fp) : NULL;
    if (!r)
        return;
    struct iez_stream_mark *m = &iez_stream_marks[fp->_fileno];
    char *ptr = fp->_IO_write_ptr, *base = fp->_IO_write_base;
    char *from = m->fp == fp && m->ptr >= base && m->ptr <= ptr ? m->ptr : base;
    if (base && ptr > from && ptr <= fp->_IO_buf_end)
        add(r, ptr - from);
    m->fp = fp;
    m->ptr = ptr;
}

/* After a call on fp that accepted n bytes: counted, and where the buffer stands noted. */
static void took(FILE *fp, long n)
{
    struct iez_record_bytes *r = stream_record(fp);
    if (!r)
        return;
    add(r, n);
    iez_stream_marks[fp->_fileno] = (struct iez_stream_mark){ fp, fp->_IO_write_ptr };
}

void iez_trace_stream_marked(int fd, FILE *fp)
{
    if (fd >= 0 && (size_t)fd < iez_fd_records_len && iez_stream_marks)
        iez_stream_marks[fd] = (struct iez_stream_mark){ fp, fp->_IO_write_ptr };
}

/* One real call writing to fp, counting `accepted` (an expression of its result r). A locking call
 * holds the stream from the look to the note, so that another thread's call on it cannot come
 * between (glibc's stream locks are recursive); flockfile and funlockfile leave errno alone. */
#define AROUND(fp, locking, call, accepted)           \
    do {                                              \
        FILE *fp_ = (fp);                             \
        if (!tracing_table() || !fp_)                 \
            return call;                              \
        int held_ = (locking) && !SINGLE_THREADED();  \
        if (held_)                                    \
            flockfile(fp_);                           \
        iez_trace_stream_look(fp_);                   \
        __typeof__(call) r = call;                    \
        took(fp_, (long)(accepted));                  \
        if (held_)                                    \
            funlockfile(fp_);                         \
        return r;                                     \
    } while (0)

/* ---- narrow characters ------------------------------------------------------------------- */

#undef putc
#undef fputc
#undef putc_unlocked
#undef fputc_unlocked
#undef putchar
#undef putchar_unlocked
#undef fwrite_unlocked
#undef fputs_unlocked
#define PUTC(name, locking) \
    IEZ_EXPORT int name(int c, FILE *fp) { AROUND(fp, locking, REAL(name)(c, fp), r != EOF); }
PUTC(fputc, 1)
PUTC(putc, 1)
PUTC(_IO_putc, 1)
PUTC(fputc_unlocked, 0)
PUTC(putc_unlocked, 0)

IEZ_EXPORT int putchar(int c) { AROUND(stdout, 1, REAL(putchar)(c), r != EOF); }
IEZ_EXPORT int putchar_unlocked(int c) { AROUND(stdout, 0, REAL(putchar_unlocked)(c), r != EOF); }

/* The buffer was full (or the stream line-buffered or unbuffered): an inlined putc's one call. */
IEZ_EXPORT int __overflow(FILE *fp, int c)
{
    AROUND(fp, 0, REAL(__overflow)(fp, c), c != EOF && r != EOF);
}

#define FPUTS(name, locking) \
    IEZ_EXPORT int name(const char *s, FILE *fp) { AROUND(fp, locking, REAL(name)(s, fp), r != EOF ? strlen(s) : 0); }
FPUTS(fputs, 1)
FPUTS(_IO_fputs, 1)
FPUTS(fputs_unlocked, 0)

IEZ_EXPORT int puts(const char *s) { AROUND(stdout, 1, REAL(puts)(s), r != EOF ? strlen(s) + 1 : 0); }
IEZ_EXPORT int _IO_puts(const char *s) { AROUND(stdout, 1, REAL(_IO_puts)(s), r != EOF ? strlen(s) + 1 : 0); }

#define FWRITE(name, locking)                                                   \
    IEZ_EXPORT size_t name(const void *buf, size_t size, size_t n, FILE *fp)    \
    {                                                                           \
        AROUND(fp, locking, REAL(name)(buf, size, n, fp), r * size); \
    }
FWRITE(fwrite, 1)
FWRITE(_IO_fwrite, 1)
FWRITE(fwrite_unlocked, 0)

IEZ_EXPORT int putw(int w, FILE *fp) { AROUND(fp, 1, REAL(putw)(w, fp), r == 0 ? sizeof w : 0); }

/* The printf family: each variadic entry point makes the real v-variant's call. */

static int count_vfprintf(FILE *fp, const char *fmt, va_list ap)
{
    AROUND(fp, 1, REAL(vfprintf)(fp, fmt, ap), r);
}

static int count_vfprintf_chk(FILE *fp, int flag, const char *fmt, va_list ap)
{
    AROUND(fp, 1, REAL(__vfprintf_chk)(fp, flag, fmt, ap), r);
}

static int count_vprintf(const char *fmt, va_list ap)
{
    AROUND(stdout, 1, REAL(vprintf)(fmt, ap), r);
}

static int count_vprintf_chk(int flag, const char *fmt, va_list ap)
{
    AROUND(stdout, 1, REAL(__vprintf_chk)(flag, fmt, ap), r);
}

#define VARIADIC(call, last)   \
    va_list ap;                \
    va_start(ap, last);        \
    int r_ = call;             \
    va_end(ap);                \
    return r_
IEZ_EXPORT int vfprintf(FILE *fp, const char *fmt, va_list ap) { return count_vfprintf(fp, fmt, ap); }
IEZ_EXPORT int _IO_vfprintf(FILE *fp, const char *fmt, va_list ap) { return count_vfprintf(fp, fmt, ap); }
IEZ_EXPORT int fprintf(FILE *fp, const char *fmt, ...) { VARIADIC(count_vfprintf(fp, fmt, ap), fmt); }
IEZ_EXPORT int _IO_fprintf(FILE *fp, const char *fmt, ...) { VARIADIC(count_vfprintf(fp, fmt, ap), fmt); }
IEZ_EXPORT int vprintf(const char *fmt, va_list ap) { return count_vprintf(fmt, ap); }
IEZ_EXPORT int printf(const char *fmt, ...) { VARIADIC(count_vprintf(fmt, ap), fmt); }
IEZ_EXPORT int _IO_printf(const char *fmt, ...) { VARIADIC(count_vprintf(fmt, ap), fmt); }
IEZ_EXPORT int __vfprintf_chk(FILE *fp, int flag, const char *fmt, va_list ap)
{
    return count_vfprintf_chk(fp, flag, fmt, ap);
}
IEZ_EXPORT int __fprintf_chk(FILE *fp, int flag, const char *fmt, ...)
{
    VARIADIC(count_vfprintf_chk(fp, flag, fmt, ap), fmt);
}
IEZ_EXPORT int __vprintf_chk(int flag, const char *fmt, va_list ap) { return count_vprintf_chk(flag, fmt, ap); }
IEZ_EXPORT int __printf_chk(int flag, const char *fmt, ...) { VARIADIC(count_vprintf_chk(flag, fmt, ap), fmt); }

/* ---- wide characters: the bytes the stream writes for them ------------------------------- */

struct wide_text {
    const wchar_t *s;
    size_t n;              /* characters of s; or, with fmt, of the formatted text */
    const wchar_t *fmt;
    va_list ap;
    long bytes;
};

/* The multibyte length of n wide characters in the locale: what the stream's conversion writes. */
static long mb_length(const wchar_t *s, size_t n)
{
    mbstate_t st;
    memset(&st, 0, sizeof st);
    char out[MB_LEN_MAX];
    long bytes = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = wcrtomb(out, s[i], &st);
        bytes += k == (size_t)-1 ? 1 : (long)k;
    }
    return bytes;
}

/* On libiez's stack: wcrtomb, and vswprintf for the printf family, take a few KiB. */
static void measure(void *arg)
{
    struct wide_text *t = arg;
    if (!t->fmt) {
        t->bytes = mb_length(t->s, t->n);
        return;
    }
    /* the printf family returns characters: the text is formatted again to know its bytes */
    size_t cap = t->n + 1;
    wchar_t *text = iez_tmp_alloc(cap * sizeof *text), *heap = NULL;
    if (!text)
        text = heap = malloc(cap * sizeof *text);
    if (!text) {
        t->bytes = (long)t->n; /* no memory: a byte a character */
        return;
    }
    int n = vswprintf(text, cap, t->fmt, t->ap);
    t->bytes = n < 0 ? (long)t->n : mb_length(text, (size_t)n);
    if (heap)
        free(heap);
    else
        iez_tmp_free(text);
}

/* Bytes of n wide characters: one each when all are ASCII, else measured on libiez's stack. */
static long wide_bytes(const wchar_t *s, size_t n)
{
    size_t i = 0;
    while (i < n && (unsigned)s[i] < 0x80)
        i++;
    if (i == n)
        return (long)n;
    struct wide_text t = { .s = s, .n = n, .bytes = (long)n };
    int saved = errno; /* wcrtomb's EILSEQ is not the application's */
    iez_on_stack(measure, &t);
    errno = saved;
    return t.bytes;
}

/* What exit() will still write of fp's buffer: __fpending, which counts a wide stream's pending
 * characters; those are converted at the flush, so their bytes are measured. glibc's struct
 * _IO_wide_data starts with the same six pointers as FILE (read, then write: base, ptr, end). */
size_t iez_stream_pending(FILE *fp)
{
    if (fp->_mode <= 0 || !fp->_wide_data)
        return __fpending(fp);
    wchar_t *const *wide = (wchar_t *const *)(void *)fp->_wide_data;
    const wchar_t *base = wide[3], *ptr = wide[4];
    return base && ptr > base ? (size_t)wide_bytes(base, (size_t)(ptr - base)) : 0;
}

#define PUTWC(name, locking)                                                                  \
    IEZ_EXPORT wint_t name(wchar_t c, FILE *fp)                                               \
    {                                                                                         \
        AROUND(fp, locking, REAL(name)(c, fp), r != WEOF ? wide_bytes(&c, 1) : 0); \
    }
PUTWC(fputwc, 1)
PUTWC(putwc, 1)
PUTWC(fputwc_unlocked, 0)
PUTWC(putwc_unlocked, 0)

IEZ_EXPORT wint_t putwchar(wchar_t c)
{
    AROUND(stdout, 1, REAL(putwchar)(c), r != WEOF ? wide_bytes(&c, 1) : 0);
}

IEZ_EXPORT wint_t putwchar_unlocked(wchar_t c)
{
    AROUND(stdout, 0, REAL(putwchar_unlocked)(c), r != WEOF ? wide_bytes(&c, 1) : 0);
}

IEZ_EXPORT wint_t __woverflow(FILE *fp, wint_t c)
{
    wchar_t w = (wchar_t)c;
    AROUND(fp, 0, REAL(__woverflow)(fp, c), c != WEOF && r != WEOF ? wide_bytes(&w, 1) : 0);
}

#define FPUTWS(name, locking)                                                                      \
    IEZ_EXPORT int name(const wchar_t *s, FILE *fp)                                                \
    {                                                                                              \
        AROUND(fp, locking, REAL(name)(s, fp), r >= 0 ? wide_bytes(s, wcslen(s)) : 0); \
    }
FPUTWS(fputws, 1)
FPUTWS(fputws_unlocked, 0)

/* A wide printf call wrote `written` characters: their bytes, from the same format and arguments. */
static long formatted_bytes(int written, const wchar_t *fmt, va_list ap)
{
    if (written <= 0)
        return 0;
    struct wide_text t = { .n = (size_t)written, .fmt = fmt, .bytes = written };
    va_copy(t.ap, ap);
    int saved = errno;
    iez_on_stack(measure, &t);
    errno = saved;
    va_end(t.ap);
    return t.bytes;
}

/* The va_list is copied before the real call uses it up: the second formatting needs it whole. */
static int count_vfwprintf(FILE *fp, const wchar_t *fmt, va_list ap)
{
    if (!tracing_table() || !fp)
        return REAL(vfwprintf)(fp, fmt, ap);
    va_list again;
    va_copy(again, ap);
    int held = !SINGLE_THREADED();
    if (held)
        flockfile(fp);
    iez_trace_stream_look(fp);
    int r = REAL(vfwprintf)(fp, fmt, ap);
    took(fp, formatted_bytes(r, fmt, again));
    if (held)
        funlockfile(fp);
    va_end(again);
    return r;
}

static int count_vfwprintf_chk(FILE *fp, int flag, const wchar_t *fmt, va_list ap)
{
    if (!tracing_table() || !fp)
        return REAL(__vfwprintf_chk)(fp, flag, fmt, ap);
    va_list again;
    va_copy(again, ap);
    int held = !SINGLE_THREADED();
    if (held)
        flockfile(fp);
    iez_trace_stream_look(fp);
    int r = REAL(__vfwprintf_chk)(fp, flag, fmt, ap);
    took(fp, formatted_bytes(r, fmt, again));
    if (held)
        funlockfile(fp);
    va_end(again);
    return r;
}

IEZ_EXPORT int vfwprintf(FILE *fp, const wchar_t *fmt, va_list ap) { return count_vfwprintf(fp, fmt, ap); }
IEZ_EXPORT int fwprintf(FILE *fp, const wchar_t *fmt, ...) { VARIADIC(count_vfwprintf(fp, fmt, ap), fmt); }
IEZ_EXPORT int vwprintf(const wchar_t *fmt, va_list ap) { return count_vfwprintf(stdout, fmt, ap); }
IEZ_EXPORT int wprintf(const wchar_t *fmt, ...) { VARIADIC(count_vfwprintf(stdout, fmt, ap), fmt); }
IEZ_EXPORT int __vfwprintf_chk(FILE *fp, int flag, const wchar_t *fmt, va_list ap)
{
    return count_vfwprintf_chk(fp, flag, fmt, ap);
}
IEZ_EXPORT int __fwprintf_chk(FILE *fp, int flag, const wchar_t *fmt, ...)
{
    VARIADIC(count_vfwprintf_chk(fp, flag, fmt, ap), fmt);
}
IEZ_EXPORT int __vwprintf_chk(int flag, const wchar_t *fmt, va_list ap)
{
    return count_vfwprintf_chk(stdout, flag, fmt, ap);
}
IEZ_EXPORT int __wprintf_chk(int flag, const wchar_t *fmt, ...)
{
    VARIADIC(count_vfwprintf_chk(stdout, flag, fmt, ap), fmt);
}

/* ---- calls that flush or move the buffer: what was stored in it counts first ------------- */

IEZ_EXPORT int fflush(FILE *fp)
{
    if (!fp && tracing_table())
        iez_trace_streams_look(); /* every stream */
    AROUND(fp, 1, REAL(fflush)(fp), 0);
}

IEZ_EXPORT int fflush_unlocked(FILE *fp)
{
    if (!fp && tracing_table())
        iez_trace_streams_look();
    AROUND(fp, 0, REAL(fflush_unlocked)(fp), 0);
}

IEZ_EXPORT int fcloseall(void)
{
    if (tracing_table())
        iez_trace_streams_look();
    return REAL(fcloseall)();
}

#define SEEK(name, type) \
    IEZ_EXPORT int name(FILE *fp, type off, int whence) { AROUND(fp, 1, REAL(name)(fp, off, whence), 0); }
SEEK(fseek, long)
SEEK(fseeko, off_t)
SEEK(fseeko64, off64_t)

IEZ_EXPORT int fsetpos(FILE *fp, const fpos_t *pos) { AROUND(fp, 1, REAL(fsetpos)(fp, pos), 0); }
IEZ_EXPORT int fsetpos64(FILE *fp, const fpos64_t *pos)
{
    AROUND(fp, 1, REAL(fsetpos64)(fp, pos), 0);
}

/* The void calls: the same look and note around them. */
#define AROUND_VOID(fp, call)                           \
    do {                                                \
        int held_ = tracing_table() && fp && !SINGLE_THREADED(); \
        if (held_)                                      \
            flockfile(fp);                              \
        if (tracing_table() && fp)                      \
            iez_trace_stream_look(fp);                  \
        call;                                           \
        if (tracing_table() && fp)                      \
            took(fp, 0);                                \
        if (held_)                                      \
            funlockfile(fp);                            \
    } while (0)

IEZ_EXPORT void rewind(FILE *fp) { AROUND_VOID(fp, REAL(rewind)(fp)); }
IEZ_EXPORT void setbuf(FILE *fp, char *buf) { AROUND_VOID(fp, REAL(setbuf)(fp, buf)); }
IEZ_EXPORT void setbuffer(FILE *fp, char *buf, size_t size)
{
    AROUND_VOID(fp, REAL(setbuffer)(fp, buf, size));
}
IEZ_EXPORT void setlinebuf(FILE *fp) { AROUND_VOID(fp, REAL(setlinebuf)(fp)); }
/* What __fpurge throws away was accepted all the same: counted, as bytes left at _exit are. */
IEZ_EXPORT void __fpurge(FILE *fp) { AROUND_VOID(fp, REAL(__fpurge)(fp)); }

IEZ_EXPORT int setvbuf(FILE *fp, char *buf, int mode, size_t size)
{
    AROUND(fp, 1, REAL(setvbuf)(fp, buf, mode, size), 0);
}

/* ---- what libc writes itself through a stream: perror, err, warn, error, psignal, putpwent ... ---- */

/* These format inside libc, so what they wrote is measured around them: how far the descriptor's offset
 * moved (what reached the file) and how much more the buffer holds. Exact when no other writer shares
 * the descriptor meanwhile (with O_APPEND, another process's appends count too). */
struct opaque {
    FILE *fp;
    off_t off;
    long pending;
};
static struct opaque at_exit; /* err, errx, verr, verrx and error with a status end in exit(): done there */

static long buffered(FILE *fp)
{
    return fp->_IO_write_base && fp->_IO_write_ptr > fp->_IO_write_base ? fp->_IO_write_ptr - fp->_IO_write_base : 0;
}

static int opaque_begin(FILE *fp, struct opaque *o)
{
    if (!tracing_table() || !fp || !stream_record(fp))
        return -1;
    iez_trace_stream_look(fp);
    int saved = errno;
    o->fp = fp;
    o->off = lseek(fp->_fileno, 0, SEEK_CUR);
    o->pending = buffered(fp);
    errno = saved;
    return o->off < 0 ? -1 : 0;
}

static void opaque_end(struct opaque *o)
{
    struct iez_record_bytes *r = o->fp ? stream_record(o->fp) : NULL;
    if (!r)
        return;
    int saved = errno;
    off_t off = lseek(o->fp->_fileno, 0, SEEK_CUR);
    errno = saved;
    if (off >= o->off)
        add(r, (long)(off - o->off) + buffered(o->fp) - o->pending);
    iez_stream_marks[o->fp->_fileno] = (struct iez_stream_mark){ o->fp, o->fp->_IO_write_ptr };
    o->fp = NULL;
}

void iez_trace_exit_write(void)
{
    if (at_exit.fp)
        opaque_end(&at_exit);
}

#define OPAQUE(stream, call)                              \
    do {                                                  \
        struct opaque o_;                                 \
        int measured_ = opaque_begin((stream), &o_) == 0; \
        call;                                             \
        if (measured_)                                    \
            opaque_end(&o_);                              \
    } while (0)
#define OPAQUE_EXIT(stream, call)                         \
    do {                                                  \
        if (opaque_begin((stream), &at_exit) != 0)        \
            at_exit.fp = NULL;                            \
        call;                                             \
    } while (0)

IEZ_EXPORT void perror(const char *s) { OPAQUE(stderr, REAL(perror)(s)); }
IEZ_EXPORT void herror(const char *s) { OPAQUE(stderr, REAL(herror)(s)); }
IEZ_EXPORT void psignal(int sig, const char *s) { OPAQUE(stderr, REAL(psignal)(sig, s)); }
IEZ_EXPORT void psiginfo(const siginfo_t *info, const char *s)
{
    OPAQUE(stderr, REAL(psiginfo)(info, s));
}
IEZ_EXPORT void vwarn(const char *fmt, va_list ap) { OPAQUE(stderr, REAL(vwarn)(fmt, ap)); }
IEZ_EXPORT void vwarnx(const char *fmt, va_list ap) { OPAQUE(stderr, REAL(vwarnx)(fmt, ap)); }
IEZ_EXPORT void warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(fmt, ap);
    va_end(ap);
}
IEZ_EXPORT void warnx(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarnx(fmt, ap);
    va_end(ap);
}
IEZ_EXPORT void verr(int status, const char *fmt, va_list ap)
{
    OPAQUE_EXIT(stderr, REAL(verr)(status, fmt, ap));
    __builtin_unreachable();
}
IEZ_EXPORT void verrx(int status, const char *fmt, va_list ap)
{
    OPAQUE_EXIT(stderr, REAL(verrx)(status, fmt, ap));
    __builtin_unreachable();
}
IEZ_EXPORT void err(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verr(status, fmt, ap);
}
IEZ_EXPORT void errx(int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrx(status, fmt, ap);
}

/* error and error_at_line have no va_list form: the call is passed on whole, arguments as they came. */
IEZ_EXPORT void error(int status, int errnum, const char *fmt, ...)
{
    struct opaque o;
    int measured = opaque_begin(stderr, &o) == 0;
    if (measured && status)
        at_exit = o;
    __builtin_apply((void (*)(void))REAL(error), __builtin_apply_args(), 256);
    if (measured)
        opaque_end(&o);
}

IEZ_EXPORT void error_at_line(int status, int errnum, const char *file, unsigned line, const char *fmt, ...)
{
    struct opaque o;
    int measured = opaque_begin(stderr, &o) == 0;
    if (measured && status)
        at_exit = o;
    __builtin_apply((void (*)(void))REAL(error_at_line), __builtin_apply_args(), 256);
    if (measured)
        opaque_end(&o);
}

#define PUTENT(name, type) \
    IEZ_EXPORT int name(const type *e, FILE *fp) { int r; OPAQUE(fp, r = REAL(name)(e, fp)); return r; }
PUTENT(putpwent, struct passwd)
PUTENT(putgrent, struct group)
PUTENT(putspent, struct spwd)
PUTENT(putsgent, struct sgrp)
IEZ_EXPORT int addmntent(FILE *fp, const struct mntent *m)
{
    int r;
    OPAQUE(fp, r = REAL(addmntent)(fp, m));
    return r;
}
