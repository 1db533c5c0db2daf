/* Layout maps (IEZ_MAP; placement_lib/README.md "Layout maps"): a job's
 * layouts in one immutable constant database (D. J. Bernstein's CDB format),
 * mapped once when the library is loaded.
 *
 * A lookup is a probe in memory: no lock, no allocation, no system call, no
 * descriptor, no socket. So it scales to any number of ranks (no DB
 * connection), is async-signal-safe and survives fork (the memory is
 * inherited). The file is closed as soon as it is read.
 *
 * A map of up to MAP_COPY_MAX bytes is read into private anonymous memory
 * (a snapshot), never left mapped from the file: a file truncated or
 * rewritten in place (`: > map.cdb`, `cp new.cdb map.cdb`) would otherwise make
 * the pages beyond its new end fault (SIGBUS) in every process that mapped it
 * (issue 31 item 1). The snapshot is taken between two fstat()s that must
 * agree (size, mtime, ctime, inode); a file being rewritten while it is read
 * is read again (3 attempts), then set aside. Larger maps are mapped shared
 * (their pages stay in the page cache once for all processes) and rely on the
 * refresh rule every iez writer follows: a new file renamed over the old. Every offset read
 * from the file is checked against its size before it is followed: a corrupt
 * or truncated map is never applied and never crashes; it is treated as no
 * map (one error counted) and lookups go to IEZ_DB.
 *
 * CDB, as written by iez.maps: 256 (position, slots) pairs of 32-bit
 * little-endian numbers (2048 bytes); the records (key length, value length,
 * key, value); then the 256 hash tables of (hash, record position) slots,
 * linearly probed from (hash >> 8) % slots in table hash & 255. The hash is
 * h = 5381; h = (h * 33) ^ byte, modulo 2^32. The key of a layout is the
 * file's absolute path; the key "iez-map" (never an absolute path) holds the
 * header: "version=1\n..." (the value encoding's version). */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CDB_HEADER 2048u
#define MAP_HEADER_KEY "iez-map"
#define MAP_VERSION_LINE "version=1\n"
/* Maps up to this size are read into private memory (a snapshot): see above. */
#define MAP_COPY_MAX (4u << 20) /* ~70,000 entries: ~2 ms per exec to read; a 1 M-entry map (58 MB) would cost ~30 ms */

enum { MAP_UNSET = 0, MAP_LOADED = 1, MAP_UNUSABLE = -1 };

/* The module's state. */
static struct {
    const unsigned char *base;
    uint64_t size;
    int state;                /* MAP_UNSET: no IEZ_MAP; read with atomics once loaded */
    int error_counted;        /* an unusable map is counted once per process */
} map;

static inline uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get64(const unsigned char *p)
{
    return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

uint32_t iez_map_hash(const void *key, size_t len)
{
    const unsigned char *k = key;
    uint32_t h = 5381;
    for (size_t i = 0; i < len; i++)
        h = (h + (h << 5)) ^ k[i];
    return h;
}

/* The value stored under key in the CDB at (base, size): 1 found, 0 not there, -1 an offset
 * outside the file (corrupt). Reads nothing it has not bounds-checked. */
static int cdb_find(const unsigned char *base, uint64_t size, const char *key, size_t klen,
                    const unsigned char **val, uint32_t *vlen)
{
    uint32_t h = iez_map_hash(key, klen);
    const unsigned char *head = base + (h & 255u) * 8u;
    uint64_t tpos = get32(head), tslots = get32(head + 4);
    if (tslots == 0)
        return 0;
    if (tpos < CDB_HEADER || tpos + tslots * 8u > size)
        return -1;
    uint64_t slot = (h >> 8) % tslots;
    for (uint64_t probes = 0; probes < tslots; probes++) {
        const unsigned char *s = base + tpos + slot * 8u;
        uint64_t rpos = get32(s + 4);
        if (rpos == 0)
            return 0; /* an empty slot ends the probe */
        if (get32(s) == h) {
            if (rpos < CDB_HEADER || rpos + 8u > size)
                return -1;
            uint64_t kl = get32(base + rpos), dl = get32(base + rpos + 4);
            if (rpos + 8u + kl + dl > size)
                return -1;
            if (kl == klen && memcmp(base + rpos + 8u, key, klen) == 0) {
                *val = base + rpos + 8u + kl;
                *vlen = (uint32_t)dl;
                return 1;
            }
        }
        if (++slot == tslots)
            slot = 0;
    }
    return 0;
}

/* Whether the 256 table pointers stay inside the file: then cdb_find only has records left to check. */
static int tables_fit(const unsigned char *base, uint64_t size)
{
    for (unsigned t = 0; t < 256; t++) {
        uint64_t pos = get32(base + t * 8u), slots = get32(base + t * 8u + 4);
        if (slots && (pos < CDB_HEADER || pos + slots * 8u > size))
            return 0;
    }
    return 1;
}

int iez_map_check(const void *base, uint64_t size, char *why, size_t whylen)
{
    const unsigned char *b = base;
    const unsigned char *v;
    uint32_t n;
    if (size < CDB_HEADER) {
        snprintf(why, whylen, "%llu bytes: shorter than a constant database's 2048-byte header",
                 (unsigned long long)size);
        return -1;
    }
    if (size > UINT32_MAX) {
        snprintf(why, whylen, "%llu bytes: a constant database ends before 4 GiB", (unsigned long long)size);
        return -1;
    }
    if (!tables_fit(b, size)) {
        snprintf(why, whylen, "a hash table lies outside the file (truncated or not a constant database)");
        return -1;
    }
    int rc = cdb_find(b, size, MAP_HEADER_KEY, sizeof MAP_HEADER_KEY - 1, &v, &n);
    if (rc <= 0) {
        snprintf(why, whylen, rc < 0 ? "its header record lies outside the file (truncated)"
                                     : "no \"" MAP_HEADER_KEY "\" header record: not an iez layout map");
        return -1;
    }
    if (n < sizeof MAP_VERSION_LINE - 1 || memcmp(v, MAP_VERSION_LINE, sizeof MAP_VERSION_LINE - 1) != 0) {
        snprintf(why, whylen, "header '%.*s': this libiez reads layout maps of version 1 only",
                 (int)(n < 40 ? n : 40), (const char *)v);
        return -1;
    }
    return 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* A private copy of the size bytes of fd, in anonymous memory: MAP_FAILED (errno set) when it cannot
 * be read whole or the file changed while it was read (errno EAGAIN). */
static void *snapshot(int fd, const struct stat *st)
{
    size_t size = (size_t)st->st_size;
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return MAP_FAILED;
    size_t got = 0;
    while (got < size) {
        ssize_t n = (ssize_t)syscall(SYS_pread64, fd, p + got, size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : EAGAIN; /* shorter than it was: truncated meanwhile */
            munmap(p, size);
            errno = err;
            return MAP_FAILED;
        }
        got += (size_t)n;
    }
    struct stat after;
    if (fstat(fd, &after) != 0 || !same_file(st, &after)) {
        munmap(p, size);
        errno = EAGAIN;
        return MAP_FAILED;
    }
    mprotect(p, size, PROT_READ);
    return p;
}

void iez_map_load(const char *path)
{
    if (!path || !*path)
        return;
    map.state = MAP_UNUSABLE; /* until it is read and checked */
    int saved = errno;
    int fd = iez_sys_open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0);
    if (fd < 0) {
        iez_debug("IEZ_MAP=%s cannot be opened (%s): lookups go to IEZ_DB", path, strerror(errno));
        errno = saved;
        return;
    }
    struct stat st;
    char why[160] = "";
    void *p = MAP_FAILED;
    for (int attempt = 0; attempt < 3 && p == MAP_FAILED; attempt++) {
        why[0] = 0;
        if (fstat(fd, &st) != 0)
            snprintf(why, sizeof why, "fstat: %s", strerror(errno));
        else if (!S_ISREG(st.st_mode))
            snprintf(why, sizeof why, "not a regular file");
        else if (st.st_mode & (S_IWGRP | S_IWOTH))
            snprintf(why, sizeof why, "writable by others (mode %03o): anyone could steer placement",
                     (unsigned)(st.st_mode & 0777));
        else if (st.st_uid != geteuid() && st.st_uid != 0)
            snprintf(why, sizeof why, "owned by uid %u, neither this user nor root", (unsigned)st.st_uid);
        else if (st.st_size < (off_t)CDB_HEADER || (uint64_t)st.st_size > UINT32_MAX)
            iez_map_check("", (uint64_t)st.st_size, why, sizeof why); /* says which bound */
        else if ((uint64_t)st.st_size <= MAP_COPY_MAX) {
            if ((p = snapshot(fd, &st)) == MAP_FAILED) {
                snprintf(why, sizeof why, "reading it: %s",
                         errno == EAGAIN ? "the file changed while it was read" : strerror(errno));
                if (errno == EAGAIN)
                    continue;
            }
        } else if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED)
            snprintf(why, sizeof why, "mmap: %s", strerror(errno));
        break;
    }
    iez_sys_close(fd); /* neither the snapshot nor the mapping needs a descriptor */
    if (p != MAP_FAILED && iez_map_check(p, (uint64_t)st.st_size, why, sizeof why) != 0) {
        munmap(p, (size_t)st.st_size);
        p = MAP_FAILED;
    }
    if (p == MAP_FAILED) {
        iez_debug("IEZ_MAP=%s is not used (%s): lookups go to IEZ_DB", path, why);
        errno = saved;
        return;
    }
    map.base = p;
    map.size = (uint64_t)st.st_size;
    __atomic_store_n(&map.state, MAP_LOADED, __ATOMIC_RELEASE);
    iez_debug("IEZ_MAP=%s %s (%llu bytes)", path, map.size <= MAP_COPY_MAX ? "read" : "mapped",
              (unsigned long long)map.size);
    errno = saved;
}

/* One value (README "Layout maps"): flags (1 osts, 2 layout, 4 default_layout present), stripe_size
 * (int64) and stripe_count (int32), little-endian, then each present text NUL-terminated: the DB
 * row's columns, read by the same iez_db_row as a DB lookup. */
static int decode(const char *abspath, const unsigned char *v, uint32_t n, struct iez_alloc *out)
{
    if (n < 13 || (v[0] & ~7u)) {
        iez_debug("the layout map's value for %s is malformed (%u bytes, flags %u)", abspath, n, n ? v[0] : 0);
        return IEZ_LOOKUP_ERROR;
    }
    const char *text[3] = { NULL, NULL, NULL };
    const unsigned char *p = v + 13, *end = v + n;
    for (int i = 0; i < 3; i++) {
        if (!(v[0] & (1u << i)))
            continue;
        const unsigned char *nul = memchr(p, 0, (size_t)(end - p));
        if (!nul) {
            iez_debug("the layout map's value for %s is malformed (text %d unterminated)", abspath, i);
            return IEZ_LOOKUP_ERROR;
        }
        text[i] = (const char *)p;
        p = nul + 1;
    }
    if (p != end) {
        iez_debug("the layout map's value for %s is malformed (%ld bytes left over)", abspath, (long)(end - p));
        return IEZ_LOOKUP_ERROR;
    }
    return iez_db_row(abspath, (long long)get64(v + 1), (int)get32(v + 9), text[0], text[1], text[2], out);
}

static void unusable(const char *why, const char *abspath)
{
    __atomic_store_n(&map.state, MAP_UNUSABLE, __ATOMIC_RELEASE);
    iez_debug("the layout map is corrupt (%s, looking up %s): lookups go to IEZ_DB", why, abspath);
}

int iez_map_lookup(const char *abspath, struct iez_alloc *out)
{
    int state = __atomic_load_n(&map.state, __ATOMIC_ACQUIRE);
    if (state == MAP_UNSET)
        return IEZ_MAP_NONE;
    if (state == MAP_UNUSABLE) {
        if (!__atomic_exchange_n(&map.error_counted, 1, __ATOMIC_RELAXED))
            iez_count_error(); /* once: the counts show that the job ran without its map */
        return IEZ_MAP_NONE;
    }
    const unsigned char *v;
    uint32_t n;
    int rc = cdb_find(map.base, map.size, abspath, strlen(abspath), &v, &n);
    if (rc < 0) {
        unusable("a record lies outside the file", abspath);
        return iez_map_lookup(abspath, out);
    }
    if (rc == 0)
        return IEZ_LOOKUP_MISSING; /* the map is the job's truth: no DB for paths it lacks */
    return decode(abspath, v, n, out);
}

int iez_map_active(void)
{
    return __atomic_load_n(&map.state, __ATOMIC_ACQUIRE) == MAP_LOADED;
}
