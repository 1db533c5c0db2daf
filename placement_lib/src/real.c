/* Real symbols, found lazily with dlsym(RTLD_NEXT): the library links against
 * neither MPI nor HDF5, and a symbol the process lacks simply stays NULL.
 * libiez's own file work bypasses every interposer through raw system calls. */
#include "iez.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

IEZ_TLS int iez_busy;

struct lookup {
    const char *name;
    void *fn;
};

static void next_symbol(void *p)
{
    struct lookup *l = p;
    l->fn = dlsym(RTLD_NEXT, l->name);
}

/* The first call of each interposer: dlsym and the loader take a few KiB, on libiez's stack (scratch.c). */
void *iez_real(const char *name, void **slot)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn)
        return fn;
    struct lookup l = { name, NULL };
    int saved = errno; /* the call this precedes may leave errno alone */
    if (iez_on_stack(next_symbol, &l) != 0)
        next_symbol(&l);
    errno = saved;
    if (l.fn)
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
