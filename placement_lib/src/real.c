/* Real symbols, found lazily with dlsym(RTLD_NEXT): the library links against
 * neither MPI nor HDF5, and a symbol the process lacks simply stays NULL.
 * libiez's own file work bypasses every interposer through raw system calls. */
#include "iez.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

IEZ_TLS int iez_busy;

void *iez_real(const char *name, void **slot)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (fn)
        return fn;
    fn = dlsym(RTLD_NEXT, name);
    if (fn)
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    return fn;
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
