/* Tracing's view of descriptors and streams (README "Trace CSV"):
 *
 * - copies: dup, dup2, dup3 and fcntl(F_DUPFD, F_DUPFD_CLOEXEC) give the new
 *   descriptor the old one's record, so bytes written through any copy count
 *   for the file; dup2/dup3 over a traced descriptor first let its file go;
 *   close_range and closefrom close descriptors iez would not see;
 * - streams (what they write is counted in trace_stdio.c): freopen lets the
 *   old file go and counts for the new one, fdopen's stream counts for its
 *   descriptor's file;
 * - splice into a file counts for it (tee and vmsplice only fill pipes).
 *
 * Each interposer makes exactly one real call, whose result and errno the
 * application sees; when not tracing, the only cost is one load. */
#undef _FORTIFY_SOURCE /* these are the functions the fortified headers would wrap */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

SLOT(dup); SLOT(dup2); SLOT(dup3); SLOT(fcntl); SLOT(fcntl64); SLOT(close_range); SLOT(closefrom);
SLOT(freopen); SLOT(freopen64); SLOT(fdopen); SLOT(splice); SLOT(vdprintf); SLOT(__vdprintf_chk);

static inline int tracing_table(void)
{
    return __builtin_expect(__atomic_load_n(&iez_fd_records, __ATOMIC_RELAXED) != 0, 0);
}

/* ---- copies and closes --------------------------------------------------------- */

IEZ_EXPORT int dup(int fd)
{
    int (*f)(int) = REAL(dup, int (*)(int));
    int r = f ? f(fd) : (int)syscall(SYS_dup, fd);
    if (r >= 0 && tracing_table())
        iez_trace_copied(fd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(fd, r);
    return r;
}

IEZ_EXPORT int dup2(int oldfd, int newfd)
{
    int (*f)(int, int) = REAL(dup2, int (*)(int, int));
#ifdef SYS_dup2
    int r = f ? f(oldfd, newfd) : (int)syscall(SYS_dup2, oldfd, newfd);
#else
    int r = f ? f(oldfd, newfd) : (errno = ENOSYS, -1);
#endif
    if (r >= 0 && tracing_table())
        iez_trace_copied(oldfd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(oldfd, r);
    return r;
}

IEZ_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    int (*f)(int, int, int) = REAL(dup3, int (*)(int, int, int));
    int r = f ? f(oldfd, newfd, flags) : (int)syscall(SYS_dup3, oldfd, newfd, flags);
    if (r >= 0 && tracing_table())
        iez_trace_copied(oldfd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(oldfd, r);
    return r;
}

/* fcntl's third argument is an int or a pointer by cmd; glibc itself reads it as a pointer. */
static int fcntl_common(void *slot_fn, int fd, int cmd, void *arg)
{
    int r = slot_fn ? ((int (*)(int, int, ...))slot_fn)(fd, cmd, arg) : (int)syscall(SYS_fcntl, fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && tracing_table())
        iez_trace_copied(fd, r);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && iez_bw_on)
        iez_bw_copied(fd, r);
    return r;
}

IEZ_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(REAL(fcntl, void *), fd, cmd, arg);
}

IEZ_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    void *f = REAL(fcntl64, void *);
    return fcntl_common(f ? f : REAL(fcntl, void *), fd, cmd, arg);
}

IEZ_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    int (*f)(unsigned, unsigned, int) = REAL(close_range, int (*)(unsigned, unsigned, int));
#ifdef SYS_close_range
    int r = f ? f(first, last, flags) : (int)syscall(SYS_close_range, first, last, flags);
#else
    int r = f ? f(first, last, flags) : (errno = ENOSYS, -1);
#endif
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && tracing_table() && !iez_busy)
        iez_trace_closed_range(first, last);
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && iez_bw_on)
        iez_bw_forget_range(first, last);
    return r;
}

IEZ_EXPORT void closefrom(int lowfd)
{
    void (*f)(int) = REAL(closefrom, void (*)(int));
    if (f)
        f(lowfd);
#ifdef SYS_close_range
    else
        syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0);
#endif
    if (tracing_table() && !iez_busy && lowfd >= 0)
        iez_trace_closed_range((unsigned)lowfd, ~0U);
    if (iez_bw_on && lowfd >= 0)
        iez_bw_forget_range((unsigned)lowfd, ~0U);
}

IEZ_EXPORT ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags)
{
    ssize_t r = REAL(splice, ssize_t (*)(int, loff_t *, int, loff_t *, size_t, unsigned))(in, in_off, out, out_off,
                                                                                          n, flags);
    iez_count_write(out, r);
    return r;
}

/* ---- freopen --------------------------------------------------------------------- */

typedef FILE *(*freopen_fn)(const char *, const char *, FILE *);

static FILE *freopen_common(freopen_fn real, const char *path, const char *mode, FILE *fp)
{
    if (!real) {
        errno = ENOSYS;
        return NULL;
    }
    int tracing = !iez_busy && iez_cfg()->mode == IEZ_MODE_TRACE;
    void *old = NULL;
    if (tracing && fp) {
        iez_trace_stream_look(fp); /* what the program stored in its buffer: freopen flushes it */
        int saved = errno;
        int fd = fileno(fp);
        errno = saved;
        old = fd >= 0 ? iez_trace_detach(fd) : NULL; /* freopen closes it inside libc */
    }
    FILE *r = real(path, mode, fp);
    if (r && tracing && mode) {
        if (path) {
            iez_trace_opened_file(path, r, mode);
        } else if (old && iez_trace_stdio_writes(mode)) {
            int saved = errno; /* a NULL path reopens the same file: the record follows */
            int fd = fileno(r);
            errno = saved;
            iez_trace_bind(fd, old);
        }
    }
    if (old)
        iez_trace_size_by_path(old); /* after the flush freopen did */
    return r;
}

IEZ_EXPORT FILE *freopen(const char *path, const char *mode, FILE *fp)
{
    return freopen_common(REAL(freopen, freopen_fn), path, mode, fp);
}

/* fdopen's stream counts through its descriptor already; knowing it sizes a file left open at exit. */
IEZ_EXPORT FILE *fdopen(int fd, const char *mode)
{
    FILE *r = REAL(fdopen, FILE *(*)(int, const char *))(fd, mode);
    if (r && tracing_table() && !iez_busy && iez_trace_stdio_writes(mode)) {
        iez_trace_stream(fd, r);
        iez_trace_stream_marked(fd, r);
    }
    return r;
}

IEZ_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *fp)
{
    freopen_fn f = REAL(freopen64, freopen_fn);
    return freopen_common(f ? f : REAL(freopen, freopen_fn), path, mode, fp);
}

typedef int (*vdprintf_fn)(int, const char *, va_list);
typedef int (*vdprintf_chk_fn)(int, int, const char *, va_list);

/* dprintf formats into a stream of its own on fd and writes it with libc's internal __write. */
IEZ_EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
    int r = REAL(vdprintf, vdprintf_fn)(fd, fmt, ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int dprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = REAL(vdprintf, vdprintf_fn)(fd, fmt, ap);
    va_end(ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
    int r = REAL(__vdprintf_chk, vdprintf_chk_fn)(fd, flag, fmt, ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = REAL(__vdprintf_chk, vdprintf_chk_fn)(fd, flag, fmt, ap);
    va_end(ap);
    iez_count_write(fd, r);
    return r;
}
