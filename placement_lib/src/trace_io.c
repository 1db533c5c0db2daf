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
#include "real.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif


static inline int tracing_table(void)
{
    return __builtin_expect(__atomic_load_n(&iez_fd_records, __ATOMIC_RELAXED) != 0, 0);
}

/* ---- copies and closes --------------------------------------------------------- */

IEZ_EXPORT int dup(int fd)
{
    int r = REAL(dup)(fd);
    if (r >= 0 && tracing_table())
        iez_trace_copied(fd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(fd, r);
    return r;
}

IEZ_EXPORT int dup2(int oldfd, int newfd)
{
    int r = REAL(dup2)(oldfd, newfd);
    if (r >= 0 && tracing_table())
        iez_trace_copied(oldfd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(oldfd, r);
    return r;
}

IEZ_EXPORT int dup3(int oldfd, int newfd, int flags)
{
    int r = REAL(dup3)(oldfd, newfd, flags);
    if (r >= 0 && tracing_table())
        iez_trace_copied(oldfd, r);
    if (r >= 0 && iez_bw_on)
        iez_bw_copied(oldfd, r);
    return r;
}

/* fcntl's third argument is an int or a pointer by cmd; glibc itself reads it as a pointer. */
static int fcntl_common(iez_fcntl_fn real, int fd, int cmd, void *arg)
{
    int r = real(fd, cmd, arg);
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
    return fcntl_common(REAL(fcntl), fd, cmd, arg);
}

IEZ_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(REAL(fcntl64), fd, cmd, arg);
}

IEZ_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
    int r = REAL(close_range)(first, last, flags);
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && tracing_table() && !iez_busy)
        iez_trace_closed_range(first, last);
    if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC) && iez_bw_on)
        iez_bw_forget_range(first, last);
    return r;
}

IEZ_EXPORT void closefrom(int lowfd)
{
    REAL(closefrom)(lowfd);
    if (tracing_table() && !iez_busy && lowfd >= 0)
        iez_trace_closed_range((unsigned)lowfd, ~0U);
    if (iez_bw_on && lowfd >= 0)
        iez_bw_forget_range((unsigned)lowfd, ~0U);
}

IEZ_EXPORT ssize_t splice(int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags)
{
    ssize_t r = REAL(splice)(in, in_off, out, out_off,
                                                                                          n, flags);
    iez_count_write(out, r);
    return r;
}

/* ---- freopen --------------------------------------------------------------------- */

static FILE *freopen_common(iez_freopen_fn real, const char *path, const char *mode, FILE *fp)
{
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
    return freopen_common(REAL(freopen), path, mode, fp);
}

/* fdopen's stream counts through its descriptor already; knowing it sizes a file left open at exit. */
IEZ_EXPORT FILE *fdopen(int fd, const char *mode)
{
    FILE *r = REAL(fdopen)(fd, mode);
    if (r && tracing_table() && !iez_busy && iez_trace_stdio_writes(mode)) {
        iez_trace_stream(fd, r);
        iez_trace_stream_marked(fd, r);
    }
    return r;
}

IEZ_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *fp)
{
    return freopen_common(REAL(freopen64), path, mode, fp);
}

/* dprintf formats into a stream of its own on fd and writes it with libc's internal __write. */
IEZ_EXPORT int vdprintf(int fd, const char *fmt, va_list ap)
{
    int r = REAL(vdprintf)(fd, fmt, ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int dprintf(int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = REAL(vdprintf)(fd, fmt, ap);
    va_end(ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int __vdprintf_chk(int fd, int flag, const char *fmt, va_list ap)
{
    int r = REAL(__vdprintf_chk)(fd, flag, fmt, ap);
    iez_count_write(fd, r);
    return r;
}

IEZ_EXPORT int __dprintf_chk(int fd, int flag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = REAL(__vdprintf_chk)(fd, flag, fmt, ap);
    va_end(ap);
    iez_count_write(fd, r);
    return r;
}
