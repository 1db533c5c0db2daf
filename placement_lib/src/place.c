/* Placement mode. A new file gets its layout one of two ways:
 * - where no Lustre file system is mounted (emulation), iez makes the application's own open
 *   with O_EXCL added; when that creates the file, the layout is set on the very descriptor the
 *   application receives: one open and one fsetxattr (iez_place_open);
 * - on a Lustre client (O_LOV_DELAY_CREATE must be chosen before the open), and for MPI-IO and
 *   HDF5 (collective calls whose opens happen inside), iez creates the file with its layout
 *   first, so the application's own call opens a file that already has it (iez_place_before). */
#include "iez.h"
#include "lustre.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

IEZ_TLS int iez_decided;
IEZ_TLS int iez_in_handler;

/* Removes the file iez created at (dirfd, path) if it is still that inode. */
static void remove_created(int dirfd, const char *path, dev_t dev, ino_t ino)
{
    struct stat st;
    if (fstatat(dirfd, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev && st.st_ino == ino)
        unlinkat(dirfd, path, 0);
}

/* 0 when stored (*sidecar 1 when in the sidecar log), -1 when not. */
static int apply_emulated(int fd, const struct iez_layout *l, const char *abspath, int *sidecar)
{
    size_t len = iez_layout_text_cap(l); /* scratch, not the stack: a signal stack is small */
    char *text = iez_tmp_alloc(len);
    int rc = -1;
    int n = text ? iez_layout_format(l, text, len) : -1;
    if (n < 0) {
        iez_tmp_free(text);
        return -1;
    }
    if (fsetxattr(fd, iez_cfg()->xattr_name, text, (size_t)n, 0) == 0) {
        rc = 0;
    } else {
        iez_debug("attribute %s refused on %s (%s): using the sidecar log", iez_cfg()->xattr_name, abspath,
                  strerror(errno));
        rc = iez_sidecar_append(text, abspath);
        *sidecar = rc == 0;
    }
    iez_tmp_free(text);
    return rc;
}

/* Whether the directory's default layout is still the one iez learnt the file under (README
 * "Skips"): 1 yes, 0 no (the user or the administrator chose another since), -1 cannot tell. */
static int default_unchanged(const struct iez_alloc *a, const char *abspath, int lustre)
{
    if (!a->has_default)
        return 1; /* learnt without looking: nothing to compare */
    char *current = iez_tmp_alloc(IEZ_TEMPLATE_MAX);
    if (!current)
        return -1;
    int rc = iez_dir_default_template(abspath, lustre, current, IEZ_TEMPLATE_MAX);
    int same;
    if (rc == -1) {
        iez_debug("cannot read the default layout of the directory of %s: %s", abspath, strerror(errno));
        same = -1;
    } else if (rc == -2) {
        iez_debug("the directory of %s has a default layout iez cannot read: not the learnt one", abspath);
        same = 0;
    } else {
        same = strcmp(current, a->default_layout) == 0;
        if (!same)
            iez_debug("the directory of %s has default '%.300s', learnt '%.300s'", abspath, current,
                      a->default_layout);
    }
    iez_tmp_free(current);
    return same;
}

/* A create that missed: when its name is a temporary one (tempname.c), the layout of the final name
 * it stands for, the first of at most IEZ_TEMP_PATTERNS lookups that does not miss (README "Temporary
 * names"). No allocation but libiez's scratch memory. */
static int lookup_final_name(const char *abspath, struct iez_alloc *a, double deadline)
{
    char *final = iez_tmp_alloc(IEZ_PATH_MAX);
    int found = IEZ_LOOKUP_MISSING;
    for (int k = 0; final && k < IEZ_TEMP_PATTERNS && found == IEZ_LOOKUP_MISSING; k++)
        if (iez_temp_final(abspath, k, final, IEZ_PATH_MAX) && iez_path_considered(final)) {
            found = iez_db_lookup_until(final, a, deadline);
            if (found == IEZ_LOOKUP_FOUND)
                iez_debug("%s is a temporary name of %s: its layout", abspath, final);
        }
    iez_tmp_free(final);
    return found;
}

/* The layout for the new file (dirfd, path) into *a, with its absolute path: 1 when it should
 * be applied (*lustre says how), 0 when not (counted as a miss, a skip or an error). Nothing
 * here calls malloc: a signal handler may create while its thread is inside malloc (README
 * "Signals, fork and descriptors"). lustre_known is -1 when the directory must be asked. */
static int find_layout(int dirfd, const char *path, double deadline, char *abspath, struct iez_alloc *a,
                       int lustre_known, int *lustre)
{
    if (iez_abspath(dirfd, path, abspath, IEZ_PATH_MAX) != 0 || !iez_path_considered(abspath))
        return 0;
    int found = iez_db_lookup_until(abspath, a, deadline);
    if (found == IEZ_LOOKUP_MISSING)
        found = lookup_final_name(abspath, a, deadline);
    if (found == IEZ_LOOKUP_MISSING) {
        iez_count_miss();
        iez_debug("no allocation for %s", abspath);
        return 0;
    }
    if (found != IEZ_LOOKUP_FOUND) {
        iez_count_error();
        return 0;
    }
    *lustre = lustre_known >= 0 ? lustre_known : iez_is_lustre_dir(abspath);
    int unchanged = default_unchanged(a, abspath, *lustre);
    if (unchanged <= 0) {
        if (unchanged == 0) {
            iez_count_skip();
            iez_debug("skipped %s: its directory's default layout changed since iez learnt it (plain call)",
                      abspath);
        } else {
            iez_count_error();
        }
        return 0;
    }
    return 1;
}

static void placed(const char *abspath, const struct iez_layout *l, int lustre)
{
    iez_count_hit();
    if (l->ncomps)
        iez_debug("placed %s: %d components, %d OSTs chosen (%s)", abspath, l->ncomps, l->nosts,
                  lustre ? "lustre" : "emulated");
    else
        iez_debug("placed %s: stripe_size %llu over %d OSTs (%s)", abspath, (unsigned long long)l->stripe_size,
                  l->stripe_count, lustre ? "lustre" : "emulated");
}

/* The arguments of the calls below, for their bodies on libiez's stack (scratch.c). */
struct place_args {
    iez_open_call call;
    int which, dirfd, flags;
    const char *path;
    unsigned mode;
    int *fdp, rc;
    const struct iez_created *done;
    struct iez_created *c;
};

#define MAX_LINK_HOPS 8 /* links followed to a target that does not exist; the kernel's limit is 40 */

/* Whether the kernel follows the link (dirfd, link) for this process: fs.protected_symlinks refuses a link
 * in a sticky world-writable directory unless the follower or the directory's owner owns it. iez follows
 * no more than that setting would, whatever it is. */
static int followable(int dirfd, char *link, char *slash)
{
    struct stat lst, dst;
    if (fstatat(dirfd, link, &lst, AT_SYMLINK_NOFOLLOW) != 0)
        return 0;
    if (lst.st_uid == geteuid())
        return 1;
    int rc;
    if (slash) {
        char kept = slash[1];
        slash[1] = '\0';
        rc = fstatat(dirfd, link, &dst, 0);
        slash[1] = kept;
    } else {
        rc = fstatat(dirfd, ".", &dst, 0);
    }
    return rc == 0 && (!(dst.st_mode & S_ISVTX) || !(dst.st_mode & S_IWOTH) || dst.st_uid == lst.st_uid);
}

/* open(O_CREAT) without O_EXCL and O_NOFOLLOW of a symbolic link whose target does not exist creates the
 * target (README "Creates through dangling symbolic links"). When (dirfd, path) is a symbolic link (or a
 * chain of them), the path of what it leads to (relative to dirfd, in libiez's scratch memory): the link's
 * text, relative to the link's directory when it is relative, which the kernel resolves itself; NULL when
 * path is no link (one readlinkat: EINVAL), the chain is longer than MAX_LINK_HOPS or not followed. */
static char *link_target(int dirfd, const char *path)
{
    char *target = iez_tmp_alloc(IEZ_PATH_MAX);
    char *link = target ? iez_tmp_alloc(IEZ_PATH_MAX) : NULL;
    size_t len = link ? strnlen(path, IEZ_PATH_MAX) : IEZ_PATH_MAX;
    if (len >= IEZ_PATH_MAX)
        goto fail;
    memcpy(target, path, len + 1);
    for (int hops = 0; hops <= MAX_LINK_HOPS; hops++) {
        ssize_t n = readlinkat(dirfd, target, link, IEZ_PATH_MAX);
        if (n < 0 && hops > 0) {
            iez_tmp_free(link); /* the end of the chain: missing (ENOENT) or no link */
            return target;
        }
        if (n <= 0 || n >= IEZ_PATH_MAX || hops == MAX_LINK_HOPS)
            goto fail;
        link[n] = '\0';
        char *slash = strrchr(target, '/');
        if (!followable(dirfd, target, slash))
            goto fail;
        size_t keep = link[0] == '/' || !slash ? 0 : (size_t)(slash - target) + 1;
        if (keep + (size_t)n >= IEZ_PATH_MAX)
            goto fail;
        memcpy(target + keep, link, (size_t)n + 1);
    }
fail:
    iez_tmp_free(target);
    return NULL;
}

/* Whether the application's call that just returned fd may have created its file through a dangling link
 * (README "Creates through dangling symbolic links"): an empty regular file born since before (the coarse
 * clock the kernel stamps inodes with), or one whose birth time the file system does not say. One statx on
 * the descriptor: an O_CREAT open of an existing file pays no path walk for it. */
static int born_since(int fd, const struct timespec *before)
{
    struct statx stx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_SIZE | STATX_BTIME, &stx) != 0)
        return 0;
    if (!S_ISREG(stx.stx_mode) || stx.stx_size != 0)
        return 0;
    if (!(stx.stx_mask & STATX_BTIME))
        return 1; /* cannot tell: the link itself says */
    return stx.stx_btime.tv_sec > before->tv_sec ||
           (stx.stx_btime.tv_sec == before->tv_sec && stx.stx_btime.tv_nsec >= before->tv_nsec);
}

static int place_open(iez_open_call call, int which, int dirfd, const char *path, int flags, unsigned mode,
                      int *fdp)
{
    const struct iez_config *cfg = iez_cfg();
    int saved = errno;
    /* The application's call, except that only a new file is taken (the kernel reads the path:
     * an invalid pointer is EFAULT here as in the plain call, never a crash in libiez). */
    struct timespec before;
    /* O_NOFOLLOW: a link fails with ELOOP, never creates; O_EXCL: EEXIST */
    int via_link = !(flags & (O_EXCL | O_NOFOLLOW)) && clock_gettime(CLOCK_REALTIME_COARSE, &before) == 0;
    int fd = call(which, dirfd, path, flags | O_EXCL, mode);
    char *target = NULL;
    if (fd < 0) {
        if (flags & O_EXCL) { /* that was exactly the application's call */
            *fdp = fd;
            return IEZ_PLACE_DONE;
        }
        int err = errno;
        errno = saved; /* an existing file (or an error): the plain call says what it says */
        if (err != EEXIST || !via_link)
            return IEZ_PLACE_PLAIN;
        /* Something is there: a file, or a link whose target the plain call may create. The application's
         * own call, then a look at what it opened. */
        fd = call(which, dirfd, path, flags, mode);
        *fdp = fd;
        if (fd < 0)
            return IEZ_PLACE_DONE; /* errno as the call left it */
        if (!born_since(fd, &before) || !(target = link_target(dirfd, path))) {
            errno = saved;
            return IEZ_PLACE_DONE;
        }
    }
    /* IEZ_TIMEOUT_MS bounds libiez's part of the create, from here: waiting for other threads' lookups
     * included, the application's own open (which waits for the directory's lock while other threads
     * create in it) not */
    double deadline = iez_mono() + cfg->timeout_ms / 1000.0;
    iez_busy++;
    char *abspath = iez_tmp_alloc(IEZ_PATH_MAX);
    struct iez_alloc *a = abspath ? iez_tmp_alloc(sizeof *a) : NULL;
    int lustre = 0;
    if (!a) {
        iez_count_error();
    } else if (find_layout(dirfd, target ? target : path, deadline, abspath, a, 0, &lustre)) {
        int sidecar = 0;
        if (apply_emulated(fd, &a->layout, abspath, &sidecar) == 0) {
            placed(abspath, &a->layout, 0);
        } else {
            /* the file is the plain call's: created, unplaced */
            iez_debug("cannot record the layout of %s (%s): left as created", abspath, strerror(errno));
            iez_count_error();
        }
    }
    iez_tmp_free(a);
    iez_tmp_free(abspath);
    iez_tmp_free(target);
    iez_busy--;
    errno = saved;
    *fdp = fd;
    return IEZ_PLACE_DONE;
}

static void on_stack_open(void *p)
{
    struct place_args *a = p;
    a->rc = place_open(a->call, a->which, a->dirfd, a->path, a->flags, a->mode, a->fdp);
}

int iez_place_open(iez_open_call call, int which, int dirfd, const char *path, int flags, unsigned mode,
                   int *fdp)
{
    if (iez_cfg()->mode != IEZ_MODE_PLACE || iez_busy || iez_decided || !path)
        return IEZ_PLACE_PLAIN;
    if (iez_lustre_mounted())
        return IEZ_PLACE_PRECREATE;
    struct place_args a = { .call = call, .which = which, .dirfd = dirfd, .path = path, .flags = flags,
                            .mode = mode, .fdp = fdp };
    int was = iez_in_handler; /* a handler's create may interrupt this one before its lookup */
    iez_in_handler = iez_signal_running();
    int rc = iez_on_stack(on_stack_open, &a) == 0 ? a.rc : IEZ_PLACE_PLAIN;
    iez_in_handler = was;
    return rc;
}

static void place_before(int dirfd, const char *path, unsigned mode, struct iez_created *c)
{
    const struct iez_config *cfg = iez_cfg();
    int saved = errno;
    iez_busy++;
    double deadline = iez_mono() + cfg->timeout_ms / 1000.0;
    struct stat st;
    /* The kernel reads the path first: EFAULT here (and in the plain call), never a crash. */
    if (fstatat(dirfd, path, &st, 0) == 0 || errno != ENOENT)
        goto out; /* exists (or cannot tell): only new files are placed */
    /* a dangling link: its target is what the application's call creates */
    char *target = c->follow ? link_target(dirfd, path) : NULL;
    const char *use = target ? target : path;
    char *abspath = iez_tmp_alloc(IEZ_PATH_MAX);
    struct iez_alloc *a = abspath ? iez_tmp_alloc(sizeof *a) : NULL;
    int lustre = 0;
    if (!a) {
        if (abspath)
            iez_count_error();
        goto release;
    }
    if (!find_layout(dirfd, use, deadline, abspath, a, -1, &lustre))
        goto release;
    const struct iez_layout *l = &a->layout;
    /* Lustre: opened for writing with O_LOV_DELAY_CREATE, as lfs setstripe does. Elsewhere the attribute needs
     * no write access to the descriptor (fsetxattr checks the inode): read-only, so its close is no
     * IN_CLOSE_WRITE a directory watcher would take for a file written (README "What a directory watcher
     * sees"). */
    int flags = lustre ? O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | IEZ_O_LOV_DELAY_CREATE
                       : O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = iez_sys_openat(dirfd, use, flags, mode & 07777);
    if (fd < 0) {
        /* EEXIST: another rank or process created it first; anything else the plain call will meet too */
        if (errno != EEXIST)
            iez_count_error();
        iez_debug("cannot create %s for placement: %s", abspath, strerror(errno));
        goto release;
    }
    int sidecar = 0;
    int rc = fstat(fd, &st);
    if (rc == 0)
        rc = lustre ? iez_lustre_setstripe(fd, l) : apply_emulated(fd, l, abspath, &sidecar);
    int err = errno;
    iez_sys_close(fd);
    if (rc != 0) {
        iez_debug("cannot apply the layout of %s (%s): plain call", abspath, strerror(err));
        unlinkat(dirfd, use, 0);
        iez_count_error();
        goto release;
    }
    c->created = 1;
    c->linked = target != NULL;
    c->sidecar = sidecar;
    c->dev = st.st_dev;
    c->ino = st.st_ino;
    placed(abspath, l, lustre);
release:
    iez_tmp_free(a);
    iez_tmp_free(abspath);
    iez_tmp_free(target);
out:
    iez_busy--;
    errno = saved;
}

static void on_stack_before(void *p)
{
    struct place_args *a = p;
    place_before(a->dirfd, a->path, a->mode, a->c);
}

void iez_place_before(int dirfd, const char *path, unsigned mode, struct iez_created *c)
{
    c->created = c->sidecar = c->linked = 0;
    if (iez_cfg()->mode != IEZ_MODE_PLACE || iez_busy || iez_decided || !path)
        return;
    struct place_args a = { .dirfd = dirfd, .path = path, .mode = mode, .c = c };
    int was = iez_in_handler;
    iez_in_handler = iez_signal_running();
    iez_on_stack(on_stack_before, &a); /* when it cannot run: nothing created, the plain call */
    iez_in_handler = was;
}

void iez_place_discard(int dirfd, const char *path, int fd)
{
    int saved = errno;
    struct stat st;
    int known = fstat(fd, &st) == 0;
    iez_sys_close(fd);
    if (known)
        remove_created(dirfd, path, st.st_dev, st.st_ino);
    errno = saved;
}

static void place_undo(int dirfd, const char *path, const struct iez_created *c)
{
    int saved = errno;
    iez_busy++;
    char *target = c->linked ? link_target(dirfd, path) : NULL; /* the file iez made through the link */
    remove_created(dirfd, target ? target : path, c->dev, c->ino);
    if (c->sidecar) {
        /* the sidecar log must not keep a layout the file never got: "-" undoes the path's line */
        char *abspath = iez_tmp_alloc(IEZ_PATH_MAX);
        if (abspath && iez_abspath(dirfd, target ? target : path, abspath, IEZ_PATH_MAX) == 0)
            iez_sidecar_append("-", abspath);
        iez_tmp_free(abspath);
    }
    iez_tmp_free(target);
    iez_busy--;
    iez_debug("the application's own call failed after placement: file removed, plain call repeated");
    errno = saved;
}

static void on_stack_undo(void *p)
{
    struct place_args *a = p;
    place_undo(a->dirfd, a->path, a->done);
}

void iez_place_undo(int dirfd, const char *path, const struct iez_created *c)
{
    if (!c->created)
        return;
    struct place_args a = { .dirfd = dirfd, .path = path, .done = c };
    if (iez_on_stack(on_stack_undo, &a) != 0)
        place_undo(dirfd, path, c); /* the file iez made must go whatever the stack */
}
