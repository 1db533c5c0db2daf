/* Absolute paths for the lookup. The DB holds the paths the learning phase
 * saw, made absolute the same way, so symbolic links are not resolved (the
 * file does not exist yet, and its directory may be a link the trace saw
 * under the same name) - except before "..", where the kernel itself goes to
 * the parent of the link's target. */
#include "iez.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int iez_has_prefix(const char *path, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n == 1 && prefix[0] == '/')
        return 1;
    return strncmp(path, prefix, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

void iez_normalise(char *path)
{
    /* In place, for absolute paths: the result is built as "/comp" segments
     * over the same buffer (it never grows); ".." drops the last segment and
     * never climbs above the root. A relative path keeps no leading slash. */
    int absolute = path[0] == '/';
    size_t len = 0; /* length of the result so far */
    const char *in = path;
    while (*in) {
        while (*in == '/')
            in++;
        if (!*in)
            break;
        const char *end = strchr(in, '/');
        size_t n = end ? (size_t)(end - in) : strlen(in);
        if (n == 1 && in[0] == '.') {
            /* "." adds nothing */
        } else if (n == 2 && in[0] == '.' && in[1] == '.' && (absolute || len > 0)) {
            while (len > 0 && path[len - 1] != '/')
                len--;
            if (len > 0)
                len--; /* the separator itself */
        } else {
            if (len > 0 || absolute)
                path[len++] = '/';
            memmove(path + len, in, n);
            len += n;
        }
        in += n;
    }
    if (len == 0)
        path[len++] = absolute ? '/' : '.';
    path[len] = '\0';
}

/* Whether path has a ".." component. */
static int has_dotdot(const char *path)
{
    for (const char *p = path; (p = strstr(p, "..")) != NULL; p += 2)
        if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
            return 1;
    return 0;
}

/* The kernel's name for the directory dir (every link in it followed), into out (may be dir). */
static int kernel_dir_name(const char *dir, char *out, size_t outlen)
{
    int fd = iez_sys_open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    char link[40];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, out, outlen - 1);
    iez_sys_close(fd);
    if (n <= 0 || (size_t)n >= outlen - 1 || out[0] != '/')
        return -1;
    out[n] = '\0';
    return 0;
}

/* Folds ".", ".." and "//" of the absolute path in out the way the kernel walks it: ".."
 * after a symbolic link is the parent of the link's target, not of the link's name
 * ("dir-link/../f" is the f beside what dir-link points to). Other links stay as written. */
static int fold_like_the_kernel(char *out, size_t outlen)
{
    size_t total = strlen(out) + 1;
    char *raw = iez_tmp_alloc(total);
    if (!raw)
        return -1;
    memcpy(raw, out, total);
    size_t len = 0; /* out[0, len) is the result so far; 0 is the root */
    int rc = 0;
    for (const char *in = raw; *in && rc == 0;) {
        while (*in == '/')
            in++;
        if (!*in)
            break;
        const char *end = strchr(in, '/');
        size_t n = end ? (size_t)(end - in) : strlen(in);
        if (n == 1 && in[0] == '.') {
            /* nothing */
        } else if (n == 2 && in[0] == '.' && in[1] == '.') {
            struct stat st;
            out[len] = '\0';
            if (len > 0 && lstat(out, &st) == 0 && S_ISLNK(st.st_mode)) {
                if (kernel_dir_name(out, out, outlen) != 0) {
                    rc = -1;
                    break;
                }
                len = strcmp(out, "/") == 0 ? 0 : strlen(out);
            }
            while (len > 0 && out[len - 1] != '/')
                len--;
            if (len > 0)
                len--;
        } else {
            if (len + 1 + n >= outlen) {
                rc = -1;
                break;
            }
            out[len++] = '/';
            memcpy(out + len, in, n);
            len += n;
        }
        in += n;
    }
    if (len == 0)
        out[len++] = '/';
    out[len] = '\0';
    iez_tmp_free(raw);
    return rc;
}

/* ---- the path of a directory descriptor, remembered ----------------------------------------------------
 * openat(dirfd, name) callers (tar, cp -r, git, find) create thousands of files through one descriptor,
 * and /proc/self/fd/N costs 4.4 us a readlink (procfs instantiates the entry each time) against 0.5 us
 * for an fstat. So the path read for a descriptor is kept with the directory's (dev, ino) and reused
 * while an fstat of the descriptor still names that directory (a descriptor closed and its number
 * reused for another directory is a miss) and the path is younger than IEZ_DIRFD_FRESH_S. The age
 * bound is the price: a directory (or one above it) renamed while a program holds it is looked up
 * under its old name for that long (docs/preload.md "Directory descriptors"); the file itself is made
 * by the real call either way.
 * Any thread, or a signal handler, may read or fill a slot: each slot is a sequence lock whose writer
 * only ever tries (an odd count, or a lost compare-and-swap, means "do not cache this time"), so
 * nothing here waits. */
#define IEZ_DIRFD_SLOTS 8
#define IEZ_DIRFD_FRESH_S 0.1

struct dirfd_slot {
    unsigned seq; /* odd while a writer fills the slot */
    int fd;
    dev_t dev;
    ino_t ino;
    double read_at; /* iez_mono() of the readlink */
    size_t len;
    char path[IEZ_PATH_MAX];
};

static struct dirfd_slot dirfd_slots[IEZ_DIRFD_SLOTS];

/* 0 with the remembered path of dirfd (a directory with st's dev, ino) in out, -1 on a miss. */
static int dirfd_remembered(int dirfd, const struct stat *st, char *out, size_t outlen)
{
    struct dirfd_slot *s = &dirfd_slots[(unsigned)dirfd % IEZ_DIRFD_SLOTS];
    unsigned seq = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    if (seq & 1)
        return -1;
    int fd = __atomic_load_n(&s->fd, __ATOMIC_RELAXED);
    dev_t dev = __atomic_load_n(&s->dev, __ATOMIC_RELAXED);
    ino_t ino = __atomic_load_n(&s->ino, __ATOMIC_RELAXED);
    double read_at;
    __atomic_load(&s->read_at, &read_at, __ATOMIC_RELAXED);
    size_t len = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
    if (fd != dirfd || dev != st->st_dev || ino != st->st_ino || len == 0 || len >= outlen ||
        iez_mono() - read_at > IEZ_DIRFD_FRESH_S)
        return -1;
    memcpy(out, s->path, len + 1);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != seq || out[0] != '/' || out[len] != '\0')
        return -1; /* a writer came by: the copy may be torn */
    return 0;
}

static void dirfd_remember(int dirfd, const struct stat *st, const char *path, size_t len)
{
    struct dirfd_slot *s = &dirfd_slots[(unsigned)dirfd % IEZ_DIRFD_SLOTS];
    unsigned seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    if ((seq & 1) || len >= sizeof s->path ||
        !__atomic_compare_exchange_n(&s->seq, &seq, seq + 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&s->fd, dirfd, __ATOMIC_RELAXED);
    __atomic_store_n(&s->dev, st->st_dev, __ATOMIC_RELAXED);
    __atomic_store_n(&s->ino, st->st_ino, __ATOMIC_RELAXED);
    double now = iez_mono();
    __atomic_store(&s->read_at, &now, __ATOMIC_RELAXED);
    memcpy(s->path, path, len + 1);
    __atomic_store_n(&s->len, len, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq + 2, __ATOMIC_RELEASE);
}

/* The absolute path of the directory open as dirfd, into out (0), or -1. */
static int dirfd_path(int dirfd, char *out, size_t outlen)
{
    struct stat st;
    int known = fstat(dirfd, &st) == 0 && S_ISDIR(st.st_mode);
    if (known && dirfd_remembered(dirfd, &st, out, outlen) == 0)
        return 0;
    char link[40];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = readlink(link, out, outlen - 1);
    if (n <= 0 || out[0] != '/')
        return -1;
    out[n] = '\0';
    if (known)
        dirfd_remember(dirfd, &st, out, (size_t)n);
    return 0;
}

int iez_abspath(int dirfd, const char *path, char *out, size_t outlen)
{
    if (!path || !*path || outlen < 2)
        return -1;
    size_t plen = strlen(path), blen = 0;
    if (path[0] != '/') {
        /* the base straight into out: this runs on the create path, maybe on a small signal stack */
        if (dirfd == AT_FDCWD) {
            if (!getcwd(out, outlen))
                return -1;
        } else if (dirfd_path(dirfd, out, outlen) != 0) {
            return -1;
        }
        blen = strlen(out);
        if (blen + 1 + plen >= outlen)
            return -1;
        out[blen++] = '/';
    } else if (plen >= outlen) {
        return -1;
    }
    memcpy(out + blen, path, plen + 1);
    if (has_dotdot(out + blen))
        return fold_like_the_kernel(out, outlen);
    iez_normalise(out);
    return 0;
}
