/* libiez's own lasting descriptors (the SQLite files, the MariaDB socket), kept
 * out of the application's way (README "Signals, fork and descriptors").
 *
 * The kernel gives every open the lowest free number, so a descriptor the DB
 * client keeps would take one of the application's: its first files would get
 * other numbers, EMFILE would come early, and with 0-2 closed its stdout would
 * be SQLite's. Each one is therefore moved, close-on-exec, above the
 * application's range: past RLIMIT_NOFILE's soft limit (raised for the one
 * F_DUPFD and restored at once; descriptors above the limit stay valid), or,
 * where the limit cannot be raised, to the top of the range (its last 64
 * numbers; at a limit of 128 or less its last quarter; below 16, not moved).
 *
 * The application can still close them (close_range, closefrom, a loop over
 * every number) or put its own files on their numbers (dup2). Each is recorded
 * with its device and inode, and the DB code checks them before every use: a
 * connection whose descriptor is gone or is now another file is abandoned
 * without a call on it, so libiez never reads, unlocks or closes a file of the
 * application's.
 */
#include "iez.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_OWN 8
#define ROOM 64 /* how far above the soft limit the descriptors may go */

struct own_fd {
    int fd;
    dev_t dev;
    ino_t ino;
};
static struct {
    struct own_fd fd[MAX_OWN];
    int n;
} own; /* the module's state, under the DB lock */

IEZ_TLS int iez_hide_fds;

static int dup_above(int fd)
{
    struct rlimit old;
    if (getrlimit(RLIMIT_NOFILE, &old) != 0 || old.rlim_cur > (rlim_t)(1 << 30))
        return -1;
    int base = (int)old.rlim_cur;
    struct rlimit raised = old;
    if (old.rlim_max > old.rlim_cur)
        raised.rlim_cur = old.rlim_max - old.rlim_cur > ROOM ? old.rlim_cur + ROOM : old.rlim_max;
    else
        raised.rlim_cur = raised.rlim_max = old.rlim_cur + ROOM; /* needs CAP_SYS_RESOURCE; lowering it back never does */
    int nfd = -1;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, base);
        setrlimit(RLIMIT_NOFILE, &old);
    }
    /* the top of the range: the last numbers an application reaches (its last ROOM numbers, or at a
     * limit of 128 or less without CAP_SYS_RESOURCE its last quarter: issue 31 item 5) */
    if (nfd < 0 && base > 2 * ROOM)
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, base - ROOM);
    else if (nfd < 0 && base >= 16)
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, base - base / 4);
    return nfd;
}

/* fd moved above the application's range as iez_fd_hide does, but not recorded as the DB's (the
 * bandwidth table's descriptor, which only holds locks): the new descriptor, or fd itself. */
int iez_fd_above(int fd)
{
    if (fd < 0)
        return fd;
    int nfd = dup_above(fd);
    if (nfd < 0)
        return fd;
    iez_sys_close(fd);
    return nfd;
}

int iez_fd_hide(int fd)
{
    if (fd < 0)
        return fd;
    int nfd = dup_above(fd);
    if (nfd >= 0) {
        iez_sys_close(fd);
        fd = nfd;
    } else {
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0 && !(fl & FD_CLOEXEC))
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
    }
    struct stat st;
    if (own.n < MAX_OWN && fstat(fd, &st) == 0) {
        own.fd[own.n].fd = fd;
        own.fd[own.n].dev = st.st_dev;
        own.fd[own.n].ino = st.st_ino;
        own.n++;
    }
    return fd;
}

void iez_fd_forget(int fd)
{
    for (int i = 0; i < own.n; i++)
        if (own.fd[i].fd == fd) {
            own.fd[i] = own.fd[--own.n];
            return;
        }
}

void iez_fd_forget_all(void)
{
    own.n = 0;
}

int iez_fds_in_range(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    for (int i = 0; i < own.n; i++)
        if ((rlim_t)own.fd[i].fd < rl.rlim_cur)
            return 1;
    return 0;
}

int iez_fds_intact(void)
{
    for (int i = 0; i < own.n; i++) {
        struct stat st;
        if (fstat(own.fd[i].fd, &st) != 0 || st.st_dev != own.fd[i].dev || st.st_ino != own.fd[i].ino) {
            iez_debug("descriptor %d of the DB connection was closed or replaced by the application", own.fd[i].fd);
            return 0;
        }
    }
    return 1;
}

static int is_own(int fd)
{
    for (int i = 0; i < own.n; i++)
        if (own.fd[i].fd == fd)
            return 1;
    return 0;
}

/* Whether fd, not except and not libiez's own, names the file (dev, ino). */
static int other_names(int fd, int except, dev_t dev, ino_t ino)
{
    struct stat st;
    return fd != except && !is_own(fd) && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

/* Whether the application has the file (dev, ino) open. POSIX record locks belong to the process,
 * and closing any descriptor of a file drops every one the process holds on it, so libiez never
 * opens (and never closes) what the application may have locked (README "Signals, fork and
 * descriptors"). Unknown counts as open. */
int iez_fd_open_elsewhere(dev_t dev, ino_t ino, int except)
{
    int dir = iez_sys_open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir < 0) {
        /* out of descriptors (the connection gives its own back then): every number below the limit */
        struct rlimit rl;
        if ((errno != EMFILE && errno != ENFILE) || getrlimit(RLIMIT_NOFILE, &rl) != 0)
            return 1;
        for (rlim_t fd = 0; fd < rl.rlim_cur && fd < (1u << 20); fd++)
            if (other_names((int)fd, except, dev, ino))
                return 1;
        return 0;
    }
    char buf[4096] __attribute__((aligned(8))); /* libiez's stack: inside a DB connection's open or close */
    int found = 0;
    long n = 0;
    while (!found && (n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n && !found;) {
            struct dirent64 *d = (struct dirent64 *)(buf + off);
            off += d->d_reclen;
            char *end;
            long fd = strtol(d->d_name, &end, 10);
            found = !*end && end != d->d_name && fd != dir && other_names((int)fd, except, dev, ino);
        }
    }
    if (n < 0)
        found = 1;
    iez_sys_close(dir);
    return found;
}
