/* The real symbols libiez interposes, each declared once with its type (as Darshan's forward
 * declarations): IEZ_REAL_SYMBOLS lists them, and everything else is generated from it - the pointer
 * type iez_NAME_fn, the slot the first call fills with dlsym(RTLD_NEXT), and what the call does when
 * no library after libiez defines the symbol (real.c, one place for all of them).
 *
 *     X(name, return type, (named parameters), when missing)
 *
 * "When missing" is the body of the call that stands in for a symbol dlsym does not find, with the
 * parameters in scope (expanded in real.c only). The rule is one: a call that is one system call
 * makes it (IEZ_SYSCALL); an alternative name makes the other name's real call; every other call fails
 * as a missing function would, errno ENOSYS and its failure value (IEZ_ENOSYS); calls that end the
 * process still end it. REAL(name) is therefore never NULL: no interposer checks, none can crash on a
 * missing symbol. A missing symbol is looked up again at the next call (a library loaded since may
 * bring it). */
#ifndef IEZ_REAL_H
#define IEZ_REAL_H

#include "iez.h"

#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <wchar.h>

struct passwd;
struct group;
struct spwd;
struct sgrp;
struct mntent;

#define IEZ_REAL_SYMBOLS(X)                                                                                     \
    /* opens and creates (intercept.c) */                                                                       \
    X(open, int, (const char *path, int flags, ...), IEZ_SYSCALL(int, SYS_openat, AT_FDCWD, path, flags, IEZ_VA(flags, unsigned))) \
    X(open64, int, (const char *path, int flags, ...), IEZ_SYSCALL(int, SYS_openat, AT_FDCWD, path, flags, IEZ_VA(flags, unsigned))) \
    X(openat, int, (int dirfd, const char *path, int flags, ...), IEZ_SYSCALL(int, SYS_openat, dirfd, path, flags, IEZ_VA(flags, unsigned))) \
    X(openat64, int, (int dirfd, const char *path, int flags, ...), IEZ_SYSCALL(int, SYS_openat, dirfd, path, flags, IEZ_VA(flags, unsigned))) \
    X(__open_2, int, (const char *path, int flags), return REAL(open)(path, flags, 0u))                        \
    X(__open64_2, int, (const char *path, int flags), return REAL(open64)(path, flags, 0u))                    \
    X(__openat_2, int, (int dirfd, const char *path, int flags), return REAL(openat)(dirfd, path, flags, 0u))  \
    X(__openat64_2, int, (int dirfd, const char *path, int flags), return REAL(openat64)(dirfd, path, flags, 0u)) \
    X(fopen, FILE *, (const char *path, const char *mode), IEZ_ENOSYS(NULL))                                   \
    X(fopen64, FILE *, (const char *path, const char *mode), IEZ_ENOSYS(NULL))                                 \
    X(close, int, (int fd), IEZ_ENOSYS(-1))                                                                    \
    X(fclose, int, (FILE *fp), IEZ_ENOSYS(EOF))                                                                \
    X(socket, int, (int domain, int type, int protocol), IEZ_ENOSYS(-1))                                       \
    X(ioctl, int, (int fd, unsigned long request, ...), IEZ_SYSCALL(int, SYS_ioctl, fd, request, IEZ_VA(request, void *))) \
    X(rename, int, (const char *oldpath, const char *newpath),                                                 \
      IEZ_SYSCALL(int, SYS_renameat2, AT_FDCWD, oldpath, AT_FDCWD, newpath, 0))                                \
    X(renameat, int, (int olddirfd, const char *oldpath, int newdirfd, const char *newpath),                   \
      IEZ_SYSCALL(int, SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, 0))                                \
    X(renameat2, int, (int olddirfd, const char *oldpath, int newdirfd, const char *newpath, unsigned flags),  \
      IEZ_SYSCALL(int, SYS_renameat2, olddirfd, oldpath, newdirfd, newpath, flags))                            \
    X(_exit, void, (int status), syscall(SYS_exit_group, status))                                              \
    X(_Exit, void, (int status), syscall(SYS_exit_group, status))                                              \
    /* writes and reads (intercept.c) */                                                                        \
    X(write, ssize_t, (int fd, const void *buf, size_t n), IEZ_ENOSYS(-1))                                     \
    X(pwrite, ssize_t, (int fd, const void *buf, size_t n, off_t off), IEZ_ENOSYS(-1))                         \
    X(pwrite64, ssize_t, (int fd, const void *buf, size_t n, off_t off), IEZ_ENOSYS(-1))                       \
    X(writev, ssize_t, (int fd, const struct iovec *iov, int cnt), IEZ_ENOSYS(-1))                             \
    X(pwritev, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off), IEZ_ENOSYS(-1))                 \
    X(pwritev64, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off), IEZ_ENOSYS(-1))               \
    X(pwritev2, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off, int flags), IEZ_ENOSYS(-1))     \
    X(pwritev64v2, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off, int flags), IEZ_ENOSYS(-1))  \
    X(read, ssize_t, (int fd, void *buf, size_t n), IEZ_ENOSYS(-1))                                            \
    X(pread, ssize_t, (int fd, void *buf, size_t n, off_t off), IEZ_ENOSYS(-1))                                \
    X(pread64, ssize_t, (int fd, void *buf, size_t n, off_t off), IEZ_ENOSYS(-1))                              \
    X(readv, ssize_t, (int fd, const struct iovec *iov, int cnt), IEZ_ENOSYS(-1))                              \
    X(preadv, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off), IEZ_ENOSYS(-1))                  \
    X(preadv64, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off), IEZ_ENOSYS(-1))                \
    X(preadv2, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off, int flags), IEZ_ENOSYS(-1))      \
    X(preadv64v2, ssize_t, (int fd, const struct iovec *iov, int cnt, off_t off, int flags), IEZ_ENOSYS(-1))   \
    X(copy_file_range, ssize_t, (int in, off_t *in_off, int out, off_t *out_off, size_t n, unsigned flags),    \
      IEZ_ENOSYS(-1))                                                                                          \
    X(sendfile, ssize_t, (int out, int in, off_t *off, size_t n), IEZ_ENOSYS(-1))                              \
    X(sendfile64, ssize_t, (int out, int in, off_t *off, size_t n), IEZ_ENOSYS(-1))                            \
    /* signal handlers (signals.c; signal, bsd_signal, ssignal, sysv_signal and sigset are made there with  \
     * sigaction, as glibc makes them, so they have no real call of their own) */                               \
    X(sigaction, int, (int sig, const struct sigaction *act, struct sigaction *old), IEZ_ENOSYS(-1))           \
    X(__sigaction, int, (int sig, const struct sigaction *act, struct sigaction *old),                         \
      return REAL(sigaction)(sig, act, old))                                                                   \
    X(siginterrupt, int, (int sig, int interrupt), IEZ_ENOSYS(-1))                                             \
    /* exec (exec.c) */                                                                                         \
    X(execve, int, (const char *path, char *const argv[], char *const envp[]), IEZ_ENOSYS(-1))                 \
    X(execv, int, (const char *path, char *const argv[]), IEZ_ENOSYS(-1))                                      \
    X(execvp, int, (const char *file, char *const argv[]), IEZ_ENOSYS(-1))                                     \
    X(execvpe, int, (const char *file, char *const argv[], char *const envp[]), IEZ_ENOSYS(-1))                \
    X(fexecve, int, (int fd, char *const argv[], char *const envp[]), IEZ_ENOSYS(-1))                          \
    /* MPI-IO and HDF5 (mpi.c): handles as pointer-sized values, offsets as MPI_Offset */                       \
    X(MPI_Init, int, (int *argc, char ***argv), IEZ_ENOSYS(-1))                                                \
    X(MPI_Init_thread, int, (int *argc, char ***argv, int required, int *provided), IEZ_ENOSYS(-1))            \
    X(MPI_File_open, int, (void *comm, const char *filename, int amode, void *info, void **fh), IEZ_ENOSYS(-1)) \
    X(MPI_File_close, int, (void **fh), IEZ_ENOSYS(-1))                                                        \
    X(MPI_Type_size, int, (void *datatype, int *size), IEZ_ENOSYS(-1))                                         \
    IEZ_MPI_WRITE(X, MPI_File_write)                                                                           \
    IEZ_MPI_WRITE(X, MPI_File_write_all)                                                                       \
    IEZ_MPI_WRITE(X, MPI_File_write_shared)                                                                    \
    IEZ_MPI_WRITE(X, MPI_File_write_ordered)                                                                   \
    IEZ_MPI_WRITE(X, MPI_File_iwrite)                                                                          \
    IEZ_MPI_WRITE(X, MPI_File_iwrite_all)                                                                      \
    IEZ_MPI_WRITE(X, MPI_File_iwrite_shared)                                                                   \
    IEZ_MPI_WRITE_AT(X, MPI_File_write_at)                                                                     \
    IEZ_MPI_WRITE_AT(X, MPI_File_write_at_all)                                                                 \
    IEZ_MPI_WRITE_AT(X, MPI_File_iwrite_at)                                                                    \
    IEZ_MPI_WRITE_AT(X, MPI_File_iwrite_at_all)                                                                \
    X(MPI_File_write_all_begin, int, (void *fh, const void *buf, int n, void *dt), IEZ_ENOSYS(-1))             \
    X(MPI_File_write_ordered_begin, int, (void *fh, const void *buf, int n, void *dt), IEZ_ENOSYS(-1))         \
    X(MPI_File_write_at_all_begin, int, (void *fh, long long off, const void *buf, int n, void *dt), IEZ_ENOSYS(-1)) \
    X(H5Fcreate, int64_t, (const char *name, unsigned flags, int64_t fcpl, int64_t fapl), IEZ_ENOSYS(-1))     \
    /* descriptors' copies and closes, streams on descriptors (trace_io.c) */                                  \
    X(dup, int, (int fd), IEZ_SYSCALL(int, SYS_dup, fd))                                                       \
    X(dup2, int, (int oldfd, int newfd), IEZ_SYS_DUP2(oldfd, newfd))                                           \
    X(dup3, int, (int oldfd, int newfd, int flags), IEZ_SYSCALL(int, SYS_dup3, oldfd, newfd, flags))          \
    X(fcntl, int, (int fd, int cmd, ...), IEZ_SYSCALL(int, SYS_fcntl, fd, cmd, IEZ_VA(cmd, void *)))           \
    X(fcntl64, int, (int fd, int cmd, ...), return REAL(fcntl)(fd, cmd, IEZ_VA(cmd, void *)))                  \
    X(close_range, int, (unsigned first, unsigned last, int flags), IEZ_SYS_CLOSE_RANGE(first, last, flags))  \
    X(closefrom, void, (int lowfd), IEZ_SYS_CLOSEFROM(lowfd))                                                  \
    X(freopen, FILE *, (const char *path, const char *mode, FILE *fp), IEZ_ENOSYS(NULL))                       \
    X(freopen64, FILE *, (const char *path, const char *mode, FILE *fp), return REAL(freopen)(path, mode, fp)) \
    X(fdopen, FILE *, (int fd, const char *mode), IEZ_ENOSYS(NULL))                                            \
    X(splice, ssize_t, (int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags), IEZ_ENOSYS(-1)) \
    X(vdprintf, int, (int fd, const char *fmt, va_list ap), IEZ_ENOSYS(-1))                                    \
    X(__vdprintf_chk, int, (int fd, int flag, const char *fmt, va_list ap), IEZ_ENOSYS(-1))                    \
    /* stdio streams (trace_stdio.c) */                                                                         \
    X(fwrite, size_t, (const void *buf, size_t size, size_t n, FILE *fp), IEZ_ENOSYS(0))                       \
    X(fwrite_unlocked, size_t, (const void *buf, size_t size, size_t n, FILE *fp), IEZ_ENOSYS(0))              \
    X(_IO_fwrite, size_t, (const void *buf, size_t size, size_t n, FILE *fp), IEZ_ENOSYS(0))                   \
    X(fputc, int, (int c, FILE *fp), IEZ_ENOSYS(EOF))                                                          \
    X(putc, int, (int c, FILE *fp), IEZ_ENOSYS(EOF))                                                           \
    X(_IO_putc, int, (int c, FILE *fp), IEZ_ENOSYS(EOF))                                                       \
    X(fputc_unlocked, int, (int c, FILE *fp), IEZ_ENOSYS(EOF))                                                 \
    X(putc_unlocked, int, (int c, FILE *fp), IEZ_ENOSYS(EOF))                                                  \
    X(putchar, int, (int c), IEZ_ENOSYS(EOF))                                                                  \
    X(putchar_unlocked, int, (int c), IEZ_ENOSYS(EOF))                                                         \
    X(__overflow, int, (FILE *fp, int c), IEZ_ENOSYS(EOF))                                                     \
    X(fputs, int, (const char *s, FILE *fp), IEZ_ENOSYS(EOF))                                                  \
    X(fputs_unlocked, int, (const char *s, FILE *fp), IEZ_ENOSYS(EOF))                                         \
    X(_IO_fputs, int, (const char *s, FILE *fp), IEZ_ENOSYS(EOF))                                              \
    X(puts, int, (const char *s), IEZ_ENOSYS(EOF))                                                             \
    X(_IO_puts, int, (const char *s), IEZ_ENOSYS(EOF))                                                         \
    X(putw, int, (int w, FILE *fp), IEZ_ENOSYS(EOF))                                                           \
    X(vfprintf, int, (FILE *fp, const char *fmt, va_list ap), IEZ_ENOSYS(-1))                                  \
    X(vprintf, int, (const char *fmt, va_list ap), IEZ_ENOSYS(-1))                                             \
    X(__vfprintf_chk, int, (FILE *fp, int flag, const char *fmt, va_list ap), IEZ_ENOSYS(-1))                  \
    X(__vprintf_chk, int, (int flag, const char *fmt, va_list ap), IEZ_ENOSYS(-1))                             \
    X(fputwc, wint_t, (wchar_t c, FILE *fp), IEZ_ENOSYS(WEOF))                                                 \
    X(putwc, wint_t, (wchar_t c, FILE *fp), IEZ_ENOSYS(WEOF))                                                  \
    X(fputwc_unlocked, wint_t, (wchar_t c, FILE *fp), IEZ_ENOSYS(WEOF))                                        \
    X(putwc_unlocked, wint_t, (wchar_t c, FILE *fp), IEZ_ENOSYS(WEOF))                                         \
    X(putwchar, wint_t, (wchar_t c), IEZ_ENOSYS(WEOF))                                                         \
    X(putwchar_unlocked, wint_t, (wchar_t c), IEZ_ENOSYS(WEOF))                                                \
    X(__woverflow, wint_t, (FILE *fp, wint_t c), IEZ_ENOSYS(WEOF))                                             \
    X(fputws, int, (const wchar_t *s, FILE *fp), IEZ_ENOSYS(-1))                                               \
    X(fputws_unlocked, int, (const wchar_t *s, FILE *fp), IEZ_ENOSYS(-1))                                      \
    X(vfwprintf, int, (FILE *fp, const wchar_t *fmt, va_list ap), IEZ_ENOSYS(-1))                              \
    X(__vfwprintf_chk, int, (FILE *fp, int flag, const wchar_t *fmt, va_list ap), IEZ_ENOSYS(-1))              \
    X(fflush, int, (FILE *fp), IEZ_ENOSYS(EOF))                                                                \
    X(fflush_unlocked, int, (FILE *fp), IEZ_ENOSYS(EOF))                                                       \
    X(fcloseall, int, (void), IEZ_ENOSYS(EOF))                                                                 \
    X(fseek, int, (FILE *fp, long off, int whence), IEZ_ENOSYS(-1))                                            \
    X(fseeko, int, (FILE *fp, off_t off, int whence), IEZ_ENOSYS(-1))                                          \
    X(fseeko64, int, (FILE *fp, off64_t off, int whence), IEZ_ENOSYS(-1))                                      \
    X(fsetpos, int, (FILE *fp, const fpos_t *pos), IEZ_ENOSYS(-1))                                             \
    X(fsetpos64, int, (FILE *fp, const fpos64_t *pos), IEZ_ENOSYS(-1))                                         \
    X(setvbuf, int, (FILE *fp, char *buf, int mode, size_t size), IEZ_ENOSYS(-1))                              \
    X(rewind, void, (FILE *fp), IEZ_ENOSYS())                                                                  \
    X(setbuf, void, (FILE *fp, char *buf), IEZ_ENOSYS())                                                       \
    X(setbuffer, void, (FILE *fp, char *buf, size_t size), IEZ_ENOSYS())                                       \
    X(setlinebuf, void, (FILE *fp), IEZ_ENOSYS())                                                              \
    X(__fpurge, void, (FILE *fp), IEZ_ENOSYS())                                                                \
    /* what libc writes itself through a stream (trace_stdio.c) */                                             \
    X(perror, void, (const char *s), IEZ_ENOSYS())                                                             \
    X(herror, void, (const char *s), IEZ_ENOSYS())                                                             \
    X(psignal, void, (int sig, const char *s), IEZ_ENOSYS())                                                   \
    X(psiginfo, void, (const siginfo_t *info, const char *s), IEZ_ENOSYS())                                    \
    X(vwarn, void, (const char *fmt, va_list ap), IEZ_ENOSYS())                                                \
    X(vwarnx, void, (const char *fmt, va_list ap), IEZ_ENOSYS())                                               \
    X(verr, void, (int status, const char *fmt, va_list ap), REAL(vwarn)(fmt, ap); exit(status))              \
    X(verrx, void, (int status, const char *fmt, va_list ap), REAL(vwarnx)(fmt, ap); exit(status))            \
    X(error, void, (int status, int errnum, const char *fmt, ...), IEZ_ENOSYS_EXIT(status))                    \
    X(error_at_line, void, (int status, int errnum, const char *file, unsigned line, const char *fmt, ...),    \
      IEZ_ENOSYS_EXIT(status))                                                                                 \
    X(putpwent, int, (const struct passwd *e, FILE *fp), IEZ_ENOSYS(-1))                                       \
    X(putgrent, int, (const struct group *e, FILE *fp), IEZ_ENOSYS(-1))                                        \
    X(putspent, int, (const struct spwd *e, FILE *fp), IEZ_ENOSYS(-1))                                         \
    X(putsgent, int, (const struct sgrp *e, FILE *fp), IEZ_ENOSYS(-1))                                         \
    X(addmntent, int, (FILE *fp, const struct mntent *m), IEZ_ENOSYS(1))

/* The MPI write calls share their types: with a status (or a request), and with an offset too. */
#define IEZ_MPI_WRITE(X, name) \
    X(name, int, (void *fh, const void *buf, int n, void *dt, void *status), IEZ_ENOSYS(-1))
#define IEZ_MPI_WRITE_AT(X, name) \
    X(name, int, (void *fh, long long off, const void *buf, int n, void *dt, void *status), IEZ_ENOSYS(-1))

/* iez_NAME_fn: the type of each real symbol. */
#define IEZ_REAL_TYPEDEF(name, ret, params, missing) typedef ret (*iez_##name##_fn) params;
IEZ_REAL_SYMBOLS(IEZ_REAL_TYPEDEF)
#undef IEZ_REAL_TYPEDEF

enum iez_real_symbol {
#define IEZ_REAL_ENUM(name, ret, params, missing) IEZ_REAL_##name,
    IEZ_REAL_SYMBOLS(IEZ_REAL_ENUM)
#undef IEZ_REAL_ENUM
    IEZ_REAL_COUNT
};

/* The slots: NULL until the first call of each symbol finds it. */
extern void *iez_real_slots[IEZ_REAL_COUNT];
/* The real function: found with dlsym(RTLD_NEXT) on libiez's stack and kept, or the stand-in above. */
void *iez_real(enum iez_real_symbol sym);

/* The common case (already resolved) is one load, inlined into the interposer. */
static inline void *iez_real_cached(enum iez_real_symbol sym)
{
    void *fn = __atomic_load_n(&iez_real_slots[sym], __ATOMIC_ACQUIRE);
    return __builtin_expect(fn != 0, 1) ? fn : iez_real(sym);
}

/* The real NAME, typed, never NULL. */
#define REAL(name) ((iez_##name##_fn)iez_real_cached(IEZ_REAL_##name))

#endif
