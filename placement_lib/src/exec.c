/* exec replaces the process image and runs no destructor: the counts and the
 * trace of what ran before it are written first (a shell's child places a
 * redirected file, then execs the command). If the exec fails, the process
 * goes on counting from zero, since what it counted is already written. */
#include "real.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>


#define AROUND_EXEC(call)                       \
    do {                                        \
        iez_report_before_exec();               \
        int rc_ = (call);                       \
        int err_ = errno;                       \
        iez_report_exec_failed();               \
        errno = err_;                           \
        return rc_;                             \
    } while (0)

IEZ_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    AROUND_EXEC(REAL(execve)(path, argv, envp));
}

IEZ_EXPORT int execv(const char *path, char *const argv[])
{
    AROUND_EXEC(REAL(execv)(path, argv));
}

IEZ_EXPORT int execvp(const char *file, char *const argv[])
{
    AROUND_EXEC(REAL(execvp)(file, argv));
}

IEZ_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    AROUND_EXEC(REAL(execvpe)(file, argv, envp));
}

IEZ_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    AROUND_EXEC(REAL(fexecve)(fd, argv, envp));
}

/* The list forms: glibc's execl* call execve internally, not through the symbol above. */
#define ARGV_FROM_LIST(first, ap, argv, with_env, envp)                 \
    size_t n_ = 0; /* arguments after the first, up to and with NULL */ \
    va_list count_;                                                     \
    va_copy(count_, ap);                                                \
    while (++n_, va_arg(count_, char *))                                \
        ;                                                               \
    va_end(count_);                                                     \
    char **argv = alloca((n_ + 1) * sizeof(char *));                    \
    argv[0] = (char *)(first);                                          \
    for (size_t i_ = 1; i_ <= n_; i_++)                                 \
        argv[i_] = va_arg(ap, char *);                                  \
    char **envp = with_env ? va_arg(ap, char **) : NULL;

IEZ_EXPORT int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    ARGV_FROM_LIST(arg, ap, argv, 0, envp)
    va_end(ap);
    (void)envp;
    return execv(path, argv);
}

IEZ_EXPORT int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    ARGV_FROM_LIST(arg, ap, argv, 0, envp)
    va_end(ap);
    (void)envp;
    return execvp(file, argv);
}

IEZ_EXPORT int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    ARGV_FROM_LIST(arg, ap, argv, 1, envp)
    va_end(ap);
    return execve(path, argv, envp);
}
