/* The POSIX and stdio interposers. Each one makes exactly one "real" call whose
 * result and errno the application sees; iez's own work happens before it
 * (placement) or after it with errno saved (tracing). */
#include "real.h"
#include "lustre.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>


enum which { W_OPEN, W_OPEN64, W_OPENAT, W_OPENAT64 };

static int call_open(int w, int dirfd, const char *path, int flags, unsigned mode)
{
    switch (w) {
    case W_OPEN:
        return REAL(open)(path, flags, mode);
    case W_OPEN64:
        return REAL(open64)(path, flags, mode);
    case W_OPENAT:
        return REAL(openat)(dirfd, path, flags, mode);
    default:
        return REAL(openat64)(dirfd, path, flags, mode);
    }
}

/* O_PATH ignores O_CREAT (the kernel creates nothing and fails on a missing file): never placed. */
static inline int creates(int flags)
{
    return (flags & O_CREAT) && !(flags & O_PATH) && (flags & O_TMPFILE) != O_TMPFILE;
}

static int open_common(enum which w, int dirfd, const char *path, int flags, unsigned mode)
{
    if (iez_busy) {
        int fd = call_open(w, dirfd, path, flags, mode);
        /* a file the DB client opens (Connector/C's; libiez's SQLite opens its own, db_sqlite.c): above
         * the application's range (fds.c) */
        return iez_hide_fds && fd >= 0 ? iez_fd_hide(fd) : fd;
    }
    const struct iez_config *cfg = iez_cfg();
    if (cfg->mode == IEZ_MODE_OFF) {
        int fd = call_open(w, dirfd, path, flags, mode);
        if (fd >= 0 && iez_bw_on && !(flags & O_PATH))
            iez_bw_opened(fd);
        return fd;
    }
    struct iez_created c = { 0 };
    int at = w == W_OPEN || w == W_OPEN64 ? AT_FDCWD : dirfd;
    int fd = -1, how = IEZ_PLACE_PLAIN;
    if (cfg->mode == IEZ_MODE_PLACE && creates(flags)) {
        how = iez_place_open(call_open, w, at, path, flags, mode, &fd);
        if (how == IEZ_PLACE_PRECREATE) {
            c.follow = !(flags & (O_EXCL | O_NOFOLLOW)); /* with either, a dangling link makes the call fail */
            iez_place_before(at, path, mode, &c);
        }
    }
    if (how != IEZ_PLACE_DONE) {
        fd = call_open(w, dirfd, path, c.created ? flags & ~O_EXCL : flags, mode);
        if (fd < 0 && c.created) {
            iez_place_undo(at, path, &c);
            fd = call_open(w, dirfd, path, flags, mode);
        }
    }
    if (fd < 0 && errno == EMFILE && cfg->mode == IEZ_MODE_PLACE && iez_db_release_for_emfile())
        fd = call_open(w, dirfd, path, flags, mode); /* the numbers libiez held are the application's again */
    if (fd >= 0 && __builtin_expect(iez_db_watched != NULL, 0))
        iez_db_app_opened(path, fd);
    if (fd >= 0 && cfg->mode == IEZ_MODE_TRACE && !(flags & O_PATH))
        iez_trace_opened(at, path, fd, flags);
    if (fd >= 0 && iez_bw_on && !(flags & O_PATH))
        iez_bw_opened(fd);
    return fd;
}

static unsigned take_mode(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? va_arg(ap, unsigned) : 0;
}

IEZ_EXPORT int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    unsigned mode = take_mode(flags, ap);
    va_end(ap);
    return open_common(W_OPEN, AT_FDCWD, path, flags, mode);
}

IEZ_EXPORT int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    unsigned mode = take_mode(flags, ap);
    va_end(ap);
    return open_common(W_OPEN64, AT_FDCWD, path, flags, mode);
}

IEZ_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    unsigned mode = take_mode(flags, ap);
    va_end(ap);
    return open_common(W_OPENAT, dirfd, path, flags, mode);
}

IEZ_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    unsigned mode = take_mode(flags, ap);
    va_end(ap);
    return open_common(W_OPENAT64, dirfd, path, flags, mode);
}

IEZ_EXPORT int creat(const char *path, mode_t mode)
{
    return open_common(W_OPEN, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

IEZ_EXPORT int creat64(const char *path, mode_t mode)
{
    return open_common(W_OPEN64, AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

/* _FORTIFY_SOURCE entry points: they never create (O_CREAT needs a mode), so only tracing cares. */
static int traced(int dirfd, const char *path, int flags, int fd)
{
    if (fd >= 0 && !iez_busy && iez_cfg()->mode == IEZ_MODE_TRACE)
        iez_trace_opened(dirfd, path, fd, flags);
    return fd;
}

IEZ_EXPORT int __open_2(const char *path, int flags)
{
    return traced(AT_FDCWD, path, flags, REAL(__open_2)(path, flags));
}

IEZ_EXPORT int __open64_2(const char *path, int flags)
{
    return traced(AT_FDCWD, path, flags, REAL(__open64_2)(path, flags));
}

IEZ_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
    return traced(dirfd, path, flags, REAL(__openat_2)(dirfd, path, flags));
}

IEZ_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
    return traced(dirfd, path, flags, REAL(__openat64_2)(dirfd, path, flags));
}

#define FOPEN_MODE_CHARS 7 /* the mode characters glibc's fopen reads */

/* The open flags of an fopen mode that creates ("w" or "a", then only 'b', '+', 'x' (O_EXCL) and 'e'
 * (O_CLOEXEC), as glibc reads them) and the mode fdopen takes for the same stream ("w", "a", "w+",
 * "a+"): 0 for any other mode, which keeps the pre-creating path. */
static int fopen_flags(const char *mode, int *flags, char *stream_mode, size_t cap)
{
    int plus = 0, excl = 0, cloexec = 0;
    if (strstr(mode, ",ccs="))
        return 0; /* glibc looks for it past the 7 characters too */
    /* glibc reads the first character and at most 6 more (libio/fileops.c): the rest is ignored, so
     * "wbbbbbbx" truncates (issue 31 item 9) */
    for (const char *m = mode + 1; *m && m < mode + FOPEN_MODE_CHARS; m++) {
        if (*m == '+')
            plus = 1;
        else if (*m == 'x')
            excl = 1;
        else if (*m == 'e')
            cloexec = 1;
        else if (*m != 'b')
            return 0;
    }
    if (cap < 3)
        return 0;
    *flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | (mode[0] == 'w' ? O_TRUNC : O_APPEND) | (excl ? O_EXCL : 0) |
             (cloexec ? O_CLOEXEC : 0);
    stream_mode[0] = mode[0];
    stream_mode[1] = plus ? '+' : '\0';
    stream_mode[2] = '\0';
    return 1;
}

/* fopen modes that create: "w..." and "a..."; glibc's 'x' means O_EXCL. */
static FILE *fopen_placed(iez_fopen_fn real, const char *path, const char *mode)
{
    if (iez_busy || !path || !mode)
        return real(path, mode);
    const struct iez_config *cfg = iez_cfg();
    if (cfg->mode == IEZ_MODE_OFF)
        return real(path, mode);
    struct iez_created c = { 0 };
    char plain[32];
    const char *use = mode;
    int how = IEZ_PLACE_PRECREATE;
    if (cfg->mode == IEZ_MODE_PLACE && (mode[0] == 'w' || mode[0] == 'a')) {
        int flags;
        if (fopen_flags(mode, &flags, plain, sizeof plain)) {
            int fd = -1;
            how = iez_place_open(call_open, W_OPEN, AT_FDCWD, path, flags, 0666, &fd);
            if (how == IEZ_PLACE_DONE) {
                if (fd < 0)
                    return NULL; /* "x" on an existing file: the call fopen makes, errno as it left it */
                FILE *fp = fdopen(fd, plain);
                if (fp)
                    return fp;
                iez_place_discard(AT_FDCWD, path, fd); /* no memory for the stream: as fopen, nothing made */
                return NULL;
            }
        }
    }
    if (how == IEZ_PLACE_PRECREATE && cfg->mode == IEZ_MODE_PLACE && (mode[0] == 'w' || mode[0] == 'a')) {
        c.follow = !memchr(mode, 'x', strnlen(mode, FOPEN_MODE_CHARS)); /* "x": O_EXCL, never through a link */
        iez_place_before(AT_FDCWD, path, 0666, &c);
        if (c.created && memchr(mode, 'x', strnlen(mode, FOPEN_MODE_CHARS)) && strlen(mode) < sizeof plain) {
            size_t n = 0;
            for (const char *m = mode; *m; m++)
                if (*m != 'x' || m >= mode + FOPEN_MODE_CHARS) /* an 'x' glibc reads: the file is ours now */
                    plain[n++] = *m;
            plain[n] = '\0';
            use = plain;
        }
    }
    FILE *fp = real(path, use);
    if (!fp && c.created) {
        iez_place_undo(AT_FDCWD, path, &c);
        fp = real(path, mode);
    }
    if (!fp && errno == EMFILE && cfg->mode == IEZ_MODE_PLACE && iez_db_release_for_emfile())
        fp = real(path, mode);
    if (fp && cfg->mode == IEZ_MODE_TRACE)
        iez_trace_opened_file(path, fp, mode);
    return fp;
}

static FILE *fopen_common(iez_fopen_fn real, const char *path, const char *mode)
{
    FILE *fp = fopen_placed(real, path, mode);
    if (fp && iez_bw_on && !iez_busy) {
        int saved = errno;
        iez_bw_opened(fileno(fp));
        errno = saved;
    }
    return fp;
}

IEZ_EXPORT FILE *fopen(const char *path, const char *mode)
{
    return fopen_common(REAL(fopen), path, mode);
}

IEZ_EXPORT FILE *fopen64(const char *path, const char *mode)
{
    return fopen_common(REAL(fopen64), path, mode);
}

/* ---- tracing: writes and closes ------------------------------------------- */

/* Writes: the descriptor table exists only in tracing mode, so iez_count_write's first
 * load is the whole cost elsewhere. Opens and closes still ask the configuration. */
#define TRACING() (__builtin_expect(iez_cfg()->mode == IEZ_MODE_TRACE, 0) && !iez_busy)
#define COUNT_WRITE(fd, r) iez_count_write((fd), (r))

/* Emulated bandwidth: the call took its bytes at the descriptor's position (read after it) or at off. */
static inline void bw_seq_rw(int fd, ssize_t r, uint64_t t0, int writing)
{
    if (r > 0 && __builtin_expect(iez_bw_on, 0) && iez_bw_tracked(fd)) {
        int saved = errno;
        off_t pos = lseek(fd, 0, SEEK_CUR);
        errno = saved;
        if (pos >= r)
            iez_bw_io(fd, pos - r, r, t0, writing);
    }
}

static inline void bw_at_rw(int fd, ssize_t r, off_t off, uint64_t t0, int writing)
{
    if (r > 0 && __builtin_expect(iez_bw_on, 0) && iez_bw_tracked(fd))
        iez_bw_io(fd, off, r, t0, writing);
}

/* The write family writes; reads name their side with rd_* below. */
#define bw_seq(fd, r, t0) bw_seq_rw((fd), (r), (t0), 1)
#define bw_at(fd, r, off, t0) bw_at_rw((fd), (r), (off), (t0), 1)
#define rd_seq(fd, r, t0) bw_seq_rw((fd), (r), (t0), 0)
#define rd_at(fd, r, off, t0) bw_at_rw((fd), (r), (off), (t0), 0)

#define BW_T0() (__builtin_expect(iez_bw_on, 0) ? iez_bw_now() : 0)

IEZ_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(write)(fd, buf, n);
    COUNT_WRITE(fd, r);
    bw_seq(fd, r, t0);
    return r;
}

IEZ_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwrite)(fd, buf, n, off);
    COUNT_WRITE(fd, r);
    bw_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwrite64)(fd, buf, n, off);
    COUNT_WRITE(fd, r);
    bw_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(writev)(fd, iov, cnt);
    COUNT_WRITE(fd, r);
    bw_seq(fd, r, t0);
    return r;
}

IEZ_EXPORT ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwritev)(fd, iov, cnt, off);
    COUNT_WRITE(fd, r);
    bw_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwritev64)(fd, iov, cnt, off);
    COUNT_WRITE(fd, r);
    bw_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwritev2)(fd, iov, cnt, off, flags);
    COUNT_WRITE(fd, r);
    if (off == -1)
        bw_seq(fd, r, t0);
    else
        bw_at(fd, r, off, t0);
    return r;
}

/* Reads are interposed for emulated bandwidth only: one load of iez_bw_on otherwise. */
IEZ_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(read)(fd, buf, n);
    rd_seq(fd, r, t0);
    return r;
}

IEZ_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pread)(fd, buf, n, off);
    rd_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pread64)(fd, buf, n, off);
    rd_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(readv)(fd, iov, cnt);
    rd_seq(fd, r, t0);
    return r;
}

IEZ_EXPORT ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(preadv)(fd, iov, cnt, off);
    rd_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(preadv64)(fd, iov, cnt, off);
    rd_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(preadv2)(fd, iov, cnt, off, flags);
    if (off == -1)
        rd_seq(fd, r, t0);
    else
        rd_at(fd, r, off, t0);
    return r;
}

/* glibc's large-file names of preadv2/pwritev2, which programs built with _FILE_OFFSET_BITS=64 (Python's os
 * module among them) call. */
IEZ_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(preadv64v2)(fd, iov, cnt, off, flags);
    if (off == -1)
        rd_seq(fd, r, t0);
    else
        rd_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(pwritev64v2)(fd, iov, cnt, off, flags);
    COUNT_WRITE(fd, r);
    if (off == -1)
        bw_seq(fd, r, t0);
    else
        bw_at(fd, r, off, t0);
    return r;
}

IEZ_EXPORT ssize_t copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t n, unsigned flags)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(copy_file_range)(
        in, in_off, out, out_off, n, flags);
    COUNT_WRITE(out, r);
    if (r > 0 && __builtin_expect(iez_bw_on, 0)) {
        if (in_off)
            rd_at(in, r, *in_off - r, t0);
        else
            rd_seq(in, r, t0);
        if (out_off)
            bw_at(out, r, *out_off - r, t0);
        else
            bw_seq(out, r, t0);
    }
    return r;
}

IEZ_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(sendfile)(out, in, off, n);
    COUNT_WRITE(out, r);
    if (r > 0 && __builtin_expect(iez_bw_on, 0)) {
        if (off)
            rd_at(in, r, *off - r, t0);
        else
            rd_seq(in, r, t0);
        bw_seq(out, r, t0);
    }
    return r;
}

IEZ_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
    uint64_t t0 = BW_T0();
    ssize_t r = REAL(sendfile64)(out, in, off, n);
    COUNT_WRITE(out, r);
    if (r > 0 && __builtin_expect(iez_bw_on, 0)) {
        if (off)
            rd_at(in, r, *off - r, t0);
        else
            rd_seq(in, r, t0);
        bw_seq(out, r, t0);
    }
    return r;
}

IEZ_EXPORT int close(int fd)
{
    if (iez_hide_fds)
        iez_fd_forget(fd); /* the DB client closes one of its own */
    if (TRACING())
        iez_trace_closing(fd);
    if (__builtin_expect(iez_bw_on, 0))
        iez_bw_forget(fd);
    return REAL(close)(fd);
}

IEZ_EXPORT int fclose(FILE *fp)
{
    void *rec = NULL;
    if (fp && TRACING()) {
        iez_trace_stream_look(fp); /* what the program stored in its buffer: fclose flushes it */
        int saved = errno;
        int fd = fileno(fp);
        if (fd >= 0)
            rec = iez_trace_detach(fd);
        errno = saved;
    }
    if (fp && __builtin_expect(iez_bw_on, 0)) {
        int saved = errno;
        iez_bw_forget(fileno(fp));
        errno = saved;
    }
    int r = REAL(fclose)(fp);
    if (rec)
        iez_trace_size_by_path(rec); /* after the flush fclose does */
    return r;
}

/* Lustre's LL_IOC_FLR_SET_MIRROR (_IOW('f', 177, long)): on an emulated file with mirrors, its reads come
 * from that copy, as on Lustre (llapi_mirror_read); everything else is the real ioctl. */

IEZ_EXPORT int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (__builtin_expect(iez_bw_on, 0) && request == (unsigned long)IEZ_LL_IOC_FLR_SET_MIRROR && iez_bw_tracked(fd) &&
        iez_bw_set_mirror(fd, (unsigned long)arg) == 0)
        return 0;
    return REAL(ioctl)(fd, request, arg);
}

/* The MariaDB client's socket: above the application's range like SQLite's files (fds.c). */
IEZ_EXPORT int socket(int domain, int type, int protocol)
{
    int fd = REAL(socket)(domain, type, protocol);
    return iez_hide_fds && iez_busy && fd >= 0 ? iez_fd_hide(fd) : fd;
}

/* ---- renames (tracing) ------------------------------------------------------- */

struct renamed_args {
    int olddirfd, newdirfd;
    const char *oldpath, *newpath;
};

static void on_stack_renamed(void *p)
{
    struct renamed_args *a = p;
    char *from = iez_tmp_alloc(IEZ_PATH_MAX);
    char *to = from ? iez_tmp_alloc(IEZ_PATH_MAX) : NULL;
    if (to && iez_abspath(a->olddirfd, a->oldpath, from, IEZ_PATH_MAX) == 0 &&
        iez_abspath(a->newdirfd, a->newpath, to, IEZ_PATH_MAX) == 0 && strcmp(from, to) != 0 &&
        iez_path_considered(to))
        iez_trace_renamed(from, to);
    iez_tmp_free(from);
}

/* After a rename that succeeded: the traced file's record follows it. errno is the call's. */
static int renamed(int rc, int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    if (rc != 0 || iez_busy || iez_cfg()->mode != IEZ_MODE_TRACE || !oldpath || !newpath)
        return rc;
    int saved = errno;
    iez_busy++;
    struct renamed_args a = { olddirfd, newdirfd, oldpath, newpath };
    iez_on_stack(on_stack_renamed, &a); /* when it cannot run, the row keeps the old name */
    iez_busy--;
    errno = saved;
    return rc;
}

IEZ_EXPORT int rename(const char *oldpath, const char *newpath)
{
    int rc = REAL(rename)(oldpath, newpath);
    return renamed(rc, AT_FDCWD, oldpath, AT_FDCWD, newpath);
}

IEZ_EXPORT int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    int rc = REAL(renameat)(olddirfd, oldpath, newdirfd, newpath);
    return renamed(rc, olddirfd, oldpath, newdirfd, newpath);
}

IEZ_EXPORT int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags)
{
    int rc = REAL(renameat2)(olddirfd, oldpath, newdirfd, newpath, flags);
    if (flags & RENAME_EXCHANGE)
        return rc; /* both names stay in use: each row keeps the name it was written under */
    return renamed(rc, olddirfd, oldpath, newdirfd, newpath);
}

/* ---- process life --------------------------------------------------------- */

/* _exit skips destructors; Python's multiprocessing children leave through it. */
IEZ_EXPORT void _exit(int status)
{
    iez_report_flush();
    REAL(_exit)(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

IEZ_EXPORT void _Exit(int status)
{
    iez_report_flush();
    REAL(_Exit)(status);
    syscall(SYS_exit_group, status);
    __builtin_unreachable();
}

static void atfork_prepare(void) { iez_db_atfork_prepare(); }
static void atfork_parent(void) { iez_db_atfork_parent(); }
static void atfork_child(void)
{
    iez_db_atfork_child();
    iez_trace_atfork_child();
    iez_report_atfork_child();
}

__attribute__((constructor)) static void iez_init(void)
{
    iez_owner_pid = getpid();
    iez_cfg();
    iez_lustre_scan_mounts(); /* once, here: the create path then needs no statfs where there is no Lustre */
    const char *emulate = getenv("IEZ_EMULATE");
    if (emulate && *emulate)
        iez_bw_load(emulate); /* emulated bandwidth: ROOT/bandwidth.shm, mapped once */
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    /* the async-signal-safe calls' real symbols now: dlsym in a signal handler could wait for the loader's lock */
    (void)REAL(open); (void)REAL(open64);
    (void)REAL(openat); (void)REAL(openat64);
    (void)REAL(close); (void)REAL(write);
}

__attribute__((destructor)) static void iez_fini(void)
{
    iez_report_flush();
}
