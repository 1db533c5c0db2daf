/* Real symbols, found lazily with dlsym(RTLD_NEXT): the library links against
 * neither MPI nor HDF5, and a symbol the process lacks is stood in for by the
 * call real.h's list gives it (here, the one place that decides). libiez's own
 * file work bypasses every interposer through raw system calls. */
#include "real.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

IEZ_TLS int iez_busy;

/* ---- the stand-ins for symbols no library after libiez defines ----------------------------------- */

/* A call that is one system call makes it. */
#define IEZ_SYSCALL(type, ...) return (type)syscall(__VA_ARGS__)
/* Any other call fails as a function that does not exist: errno ENOSYS, its failure value. */
#define IEZ_ENOSYS(...) \
    errno = ENOSYS;     \
    return __VA_ARGS__
/* ... and one that ends the process with a status still ends it. */
#define IEZ_ENOSYS_EXIT(status) \
    errno = ENOSYS;             \
    if (status)                 \
        exit(status)
/* The variadic argument after `last` (the mode of an open, the argument of ioctl and fcntl): the
 * interposers always pass it. */
#define IEZ_VA(last, type)            \
    ({                                \
        va_list ap_;                  \
        va_start(ap_, last);          \
        type v_ = va_arg(ap_, type);  \
        va_end(ap_);                  \
        v_;                           \
    })
#ifdef SYS_dup2
#define IEZ_SYS_DUP2(oldfd, newfd) IEZ_SYSCALL(int, SYS_dup2, oldfd, newfd)
#else
#define IEZ_SYS_DUP2(oldfd, newfd) IEZ_ENOSYS(-1)
#endif
#ifdef SYS_close_range
#define IEZ_SYS_CLOSE_RANGE(first, last, flags) IEZ_SYSCALL(int, SYS_close_range, first, last, flags)
#define IEZ_SYS_CLOSEFROM(lowfd) syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0)
#else
#define IEZ_SYS_CLOSE_RANGE(first, last, flags) IEZ_ENOSYS(-1)
#define IEZ_SYS_CLOSEFROM(lowfd) (void)lowfd
#endif

#define MISSING(name, ret, params, missing) \
    static ret missing_##name params        \
    {                                       \
        missing;                            \
    }
IEZ_REAL_SYMBOLS(MISSING)
#undef MISSING

static const struct {
    const char *name;
    void *missing;
} symbols[IEZ_REAL_COUNT] = {
#define SYMBOL(name, ret, params, missing) [IEZ_REAL_##name] = { #name, (void *)missing_##name },
    IEZ_REAL_SYMBOLS(SYMBOL)
#undef SYMBOL
};

/* ---- lookup --------------------------------------------------------------------------------------- */

void *iez_real_slots[IEZ_REAL_COUNT];

struct lookup {
    const char *name;
    void *fn;
};

static void next_symbol(void *p)
{
    struct lookup *l = p;
    l->fn = dlsym(RTLD_NEXT, l->name);
}

/* The first call of each interposer: dlsym and the loader take a few KiB, on libiez's stack (scratch.c).
 * A symbol not found is not kept: the next call looks again, and meanwhile its stand-in answers. */
void *iez_real(enum iez_real_symbol sym)
{
    void **slot = &iez_real_slots[sym];
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn)
        return fn;
    struct lookup l = { symbols[sym].name, NULL };
    int saved = errno; /* the call this precedes may leave errno alone */
    if (iez_on_stack(next_symbol, &l) != 0)
        next_symbol(&l);
    errno = saved;
    if (!l.fn)
        return symbols[sym].missing;
    __atomic_store_n(slot, l.fn, __ATOMIC_RELEASE);
    return l.fn;
}

int iez_sys_open(const char *path, int flags, unsigned mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

int iez_sys_openat(int dirfd, const char *path, int flags, unsigned mode)
{
    return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

int iez_sys_close(int fd)
{
    return (int)syscall(SYS_close, fd);
}

ssize_t iez_sys_write(int fd, const void *buf, size_t n)
{
    return (ssize_t)syscall(SYS_write, fd, buf, n);
}
