/* libiez's own lasting descriptors (the SQLite files, the MariaDB socket), kept
 * out of the application's way (README "Signals, fork and descriptors").
 *
 * The kernel gives every open the lowest free number, so a descriptor the DB
 * client keeps would take one of the application's: its first files would get
 * other numbers, EMFILE would come early, and with 0-2 closed its stdout would
 * be SQLite's. Each one is therefore moved, close-on-exec, above the
 * application's range: past RLIMIT_NOFILE's soft limit (raised for the one
 * F_DUPFD and restored at once; descriptors above the limit stay valid), or,
 * where the limit cannot be raised, to the top of the range.
 *
 * The application can still close them (close_range, closefrom, a loop over
 * every number) or put its own files on their numbers (dup2). Each is recorded
 * with its device and inode, and the DB code checks them before every use: a
 * connection whose descriptor is gone or is now another file is abandoned
 * without a call on it, so libiez never reads, unlocks or closes a file of the
 * application's.
 */
#include "iez.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_OWN 8
#define ROOM 64 /* how far above the soft limit the descriptors may go */

struct own_fd {
    int fd;
    dev_t dev;
    ino_t ino;
};
static struct own_fd own[MAX_OWN]; /* under the DB lock */
static int nown;

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
    if (nfd < 0 && base > 2 * ROOM)
        nfd = fcntl(fd, F_DUPFD_CLOEXEC, base - ROOM); /* the top of the range: the last numbers an application reaches */
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
    if (nown < MAX_OWN && fstat(fd, &st) == 0) {
        own[nown].fd = fd;
        own[nown].dev = st.st_dev;
        own[nown].ino = st.st_ino;
        nown++;
    }
    return fd;
}

void iez_fd_forget(int fd)
{
    for (int i = 0; i < nown; i++)
        if (own[i].fd == fd) {
            own[i] = own[--nown];
            return;
        }
}

void iez_fd_forget_all(void)
{
    nown = 0;
}

int iez_fds_in_range(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    for (int i = 0; i < nown; i++)
        if ((rlim_t)own[i].fd < rl.rlim_cur)
            return 1;
    return 0;
}

int iez_fds_intact(void)
{
    for (int i = 0; i < nown; i++) {
        struct stat st;
        if (fstat(own[i].fd, &st) != 0 || st.st_dev != own[i].dev || st.st_ino != own[i].ino) {
            iez_debug("descriptor %d of the DB connection was closed or replaced by the application", own[i].fd);
            return 0;
        }
    }
    return 1;
}
