/* Emulated bandwidth (IEZ_EMULATE=ROOT): an emulator of service time, as netem is for networks.
 *
 * `iez cluster emulate` writes ROOT/bandwidth.shm: each OST's and each OSS's rate (its bandwidth
 * less its background load) and a "busy until" time. Every process on the host maps the same
 * file, so the OSTs are shared the way real servers are. A read or write of a file that carries
 * an emulated layout is split over the OSTs its bytes fall on (RAID-0 arithmetic, per component);
 * each OST, and each OSS for the sum of its OSTs' bytes, is reserved for bytes / rate seconds
 * after whatever it is already busy with (a first-come first-served server: idle time is not
 * banked). As a Lustre client keeps RPCs in flight to several OSTs at once (write-back and
 * readahead), a call returns once at most the table's window (4 MiB per server by default) of its
 * bytes is still being served, and close() waits for the rest. So a job that piles its stripes on
 * one OST takes as long as that OST needs, a sequential writer of a striped file gets the sum of
 * its OSTs, and two jobs on one OST share it.
 *
 * Shares (seed 002, vPFS): a process may belong to an I/O class (IEZ_IO_CLASS=NAME, with
 * IEZ_IO_WEIGHT=W, default 1, and IEZ_IO_SHARE=F, a cap as a fraction of each server's rate, e.g. a
 * background movement's). Each server serves each class in its own lane: the classes busy on a
 * server share its rate in proportion to their weights, a capped class never gets more than its
 * cap and what it leaves goes to the others by weight (water-filling: the fluid sharing that
 * start-time fair queuing approximates); within a class, first come first served. Processes
 * without a class share class 0 (weight 1, no cap).
 *
 * Format (little-endian, iez.emulate.bandwidth writes it): a 32-byte header, "IEZBW001", then
 * u32 version (2), u32 OST slots (the highest index + 1), u32 OSS slots, u32 class slots, u64
 * window (bytes a server may still be serving when a call returns; 0: 4 MiB); then one 32-byte
 * slot per OST index and one per OSS: f64 rate (bytes/s; 0: not throttled), u32 OSS slot (OSTs),
 * u32 flags (1: present), u64 bytes read and u64 bytes written through it since the table was made
 * (OSTs; added atomically by every process, scaled bytes; unused for OSSs); then one 32-byte slot per class: u64 key (0:
 * free, 1: class 0, else a hash of the name), f64 weight, f64 cap (0: none), u64 unused; then per
 * server (OSTs, then OSSs) one u64 busy-until (CLOCK_MONOTONIC ns) per class; then per OSS one f64
 * rate limit in bytes/s per class (0: none): the NRS TBF rules of the OSS's ost_io service, which
 * the emulator copies from the emulated tree.
 *
 * What is throttled: read, pread, readv, preadv and the write family, sendfile and
 * copy_file_range, on descriptors opened through open, openat, creat, fopen (and their copies by
 * dup, dup2, dup3 and fcntl). Not: mmap'd I/O, stdio reads (glibc reads inside fread), aio,
 * io_uring, O_DIRECT's own timing. README "Emulated bandwidth". */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define BW_MAGIC "IEZBW001"
#define BW_HEADER 32u
#define BW_SLOT 32u
#define BW_FDS 65536      /* descriptors below this are tracked; above, not throttled */
#define BW_COMPS 8        /* extents of one file's layout kept per descriptor */
#define BW_OSTS 128       /* OSTs of one file's layout kept per descriptor */
#define BW_TRUSTED_WRITERS 256 /* a lane's backlog is trusted up to this many writers' windows ... */
#define BW_TRUSTED_MIN_S 5.0   /* ... and up to this many seconds in any case */

struct bw_comp {
    uint64_t start, end, stripe_size;
    uint16_t count, first; /* count 0: no OSTs there (not instantiated, or Data-on-MDT) */
    unsigned char mirror;  /* FLR: the copy it belongs to (0: no mirrors) */
};

struct bw_file {
    int active;
    int ncomps;
    uint64_t pending;     /* when the last byte this descriptor sent is served (close waits for it) */
    unsigned char write_mirror, read_mirror; /* FLR: writes go to the primary copy (the others go stale until a
                                                resync); reads to the preferred copy, else the first in sync;
                                                LL_IOC_FLR_SET_MIRROR pins both to one copy (a resync writes
                                                the stale copy through a descriptor pinned to it) */
    struct bw_comp comps[BW_COMPS];
    uint16_t osts[BW_OSTS];
};

/* Optional tail (tables made by iez 0.x with job attribution): the class names (BW_NAME bytes each,
 * NUL-terminated, written by the process that claims the slot) and per (OST, class) u64 bytes read
 * and u64 bytes written: the emulated servers' job_stats, a job being an I/O class. */
#define BW_NAME 64
/* The module's state; out of it, iez_bw_on, which every interposer reads (iez.h). */
static struct {
    unsigned char *table;         /* the mapped ROOT/bandwidth.shm */
    int table_fd;                 /* its descriptor: the class slots' locks (below) */
    uint32_t nost_slots, noss_slots, nclasses;
    unsigned char *classes;       /* the class slots */
    uint64_t *lanes;              /* busy-until per (server, class) */
    const unsigned char *limits;  /* f64 TBF rate limit per (OSS, class) */
    uint32_t my_class;            /* this process's class slot (0: the default class) */
    unsigned char *class_names;   /* the optional tail above */
    uint64_t *job_bytes;
    double window;
    /* IEZ_EMULATE_SCALE=K: each byte read or written stands for K bytes of the file at K times its
     * offset, so a program can exercise a layout made for a file K times larger (iez demo) */
    double scale;
    struct bw_file *files;        /* by descriptor; MAP_NORESERVE: only used pages cost */
    int high_fd;                  /* the highest descriptor ever tracked: what closefrom must clear */
} bw = { .table_fd = -1, .window = 4.0 * 1024 * 1024, .scale = 1.0, .high_fd = -1 };
int iez_bw_on;                    /* read without a lock on every read and write */

static void sleep_until(uint64_t t);

static inline double slot_rate(const unsigned char *slot)
{
    double r;
    memcpy(&r, slot, sizeof r);
    return r;
}

static inline uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static unsigned char *ost_slot(uint32_t index)
{
    return index < bw.nost_slots ? bw.table + BW_HEADER + (size_t)index * BW_SLOT : NULL;
}

static unsigned char *oss_slot(uint32_t k)
{
    return k < bw.noss_slots ? bw.table + BW_HEADER + ((size_t)bw.nost_slots + k) * BW_SLOT : NULL;
}

static double get_f64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_f64(unsigned char *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    __atomic_store_n((uint64_t *)(void *)p, bits, __ATOMIC_RELAXED);
}

/* FNV-1a of the class name, never 0 (free) or 1 (the default class). */
static uint64_t class_key(const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return h > 1 ? h : h + 2;
}

/* Class slots are held with open-file-description locks (issue 31 item 4): a process in class k
 * keeps a read lock on the first byte of slot k through its descriptor of the table, which the
 * kernel drops when the last process sharing that descriptor (fork children included) exits,
 * however it ends. A process that finds every slot taken claims one no process holds: it takes
 * the write lock (granted only when no reader is left), renames the slot, clears its busy-until
 * times and turns its lock into a read lock. */

static int slot_lock(uint32_t k, short type, int cmd)
{
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_len = 1, .l_pid = 0 };
    fl.l_start = (off_t)(bw.classes - bw.table) + (off_t)k * BW_SLOT;
    return fcntl(bw.table_fd, cmd, &fl);
}

/* Holds slot k for key: 1 when it is this process's now. */
static int hold(uint32_t k, uint64_t key)
{
    uint64_t *slot_key = (uint64_t *)(void *)(bw.classes + (size_t)k * BW_SLOT);
    if (bw.table_fd >= 0 && slot_lock(k, F_RDLCK, F_OFD_SETLK) != 0)
        return 0; /* being reclaimed this instant */
    if (__atomic_load_n(slot_key, __ATOMIC_ACQUIRE) == key)
        return 1;
    if (bw.table_fd >= 0)
        slot_lock(k, F_UNLCK, F_OFD_SETLK);
    return 0;
}

/* Slot k, which no process holds, renamed key: 1 when it is this process's now. */
static int reclaim(uint32_t k, uint64_t key)
{
    if (bw.table_fd < 0 || slot_lock(k, F_WRLCK, F_OFD_SETLK) != 0)
        return 0;
    uint64_t *slot_key = (uint64_t *)(void *)(bw.classes + (size_t)k * BW_SLOT);
    __atomic_store_n(slot_key, key, __ATOMIC_RELEASE);
    for (uint32_t server = 0; server < bw.nost_slots + bw.noss_slots; server++)
        __atomic_store_n(&bw.lanes[(size_t)server * bw.nclasses + k], 0, __ATOMIC_RELAXED);
    if (bw.class_names)
        for (size_t j = 0; j < BW_NAME; j++)
            __atomic_store_n(&bw.class_names[(size_t)k * BW_NAME + j], 0, __ATOMIC_RELAXED);
    return slot_lock(k, F_RDLCK, F_OFD_SETLK) == 0; /* the write lock becomes a read lock */
}

/* This process's class from IEZ_IO_CLASS, IEZ_IO_WEIGHT and IEZ_IO_SHARE: found by name, else a
 * free slot claimed, else one whose processes have all exited. */
static void join_class(void)
{
    const char *name = getenv("IEZ_IO_CLASS");
    if (!name || !*name || !bw.nclasses)
        return;
    uint64_t key = class_key(name);
    double weight = 1.0, cap = 0.0;
    const char *w = getenv("IEZ_IO_WEIGHT"), *f = getenv("IEZ_IO_SHARE");
    if (w && *w) {
        char *end;
        double v = strtod(w, &end);
        if (*end == '\0' && v > 0 && v < 1e9)
            weight = v;
        else
            iez_debug("IEZ_IO_WEIGHT=%s is not a positive number: weight 1", w);
    }
    if (f && *f) {
        char *end;
        double v = strtod(f, &end);
        if (*end == '\0' && v > 0 && v <= 1)
            cap = v;
        else
            iez_debug("IEZ_IO_SHARE=%s is not a fraction in (0, 1]: no cap", f);
    }
    uint32_t mine = 0;
    for (int attempt = 0; attempt < 3 && !mine; attempt++) {
        for (uint32_t k = 1; k < bw.nclasses && !mine; k++) /* the class's own slot */
            if (__atomic_load_n((uint64_t *)(void *)(bw.classes + (size_t)k * BW_SLOT), __ATOMIC_ACQUIRE) == key &&
                hold(k, key))
                mine = k;
        for (uint32_t k = 1; k < bw.nclasses && !mine; k++) { /* a free one */
            uint64_t *slot_key = (uint64_t *)(void *)(bw.classes + (size_t)k * BW_SLOT);
            uint64_t expected = 0;
            if (__atomic_compare_exchange_n(slot_key, &expected, key, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                expected == key)
                if (hold(k, key))
                    mine = k;
        }
        for (uint32_t k = 1; k < bw.nclasses && !mine; k++) /* one no process holds */
            if (reclaim(k, key))
                mine = k;
    }
    if (!mine) {
        iez_debug("IEZ_IO_CLASS=%s: every class slot of the bandwidth table is held: default class", name);
        return;
    }
    if (bw.class_names) { /* the name, for the emulated job_stats (the same bytes whoever writes it) */
        unsigned char *n = bw.class_names + (size_t)mine * BW_NAME;
        size_t len = strlen(name);
        if (len > BW_NAME - 1)
            len = BW_NAME - 1;
        for (size_t j = 0; j < len; j++)
            __atomic_store_n(&n[j], (unsigned char)name[j], __ATOMIC_RELAXED);
    }
    put_f64(bw.classes + (size_t)mine * BW_SLOT + 8, weight);
    put_f64(bw.classes + (size_t)mine * BW_SLOT + 16, cap);
    bw.my_class = mine;
}

void iez_bw_load(const char *root)
{
    char path[IEZ_PATH_MAX];
    size_t n = strlen(root);
    if (n + sizeof "/bandwidth.shm" > sizeof path)
        return;
    memcpy(path, root, n);
    memcpy(path + n, "/bandwidth.shm", sizeof "/bandwidth.shm");
    int fd = iez_sys_open(path, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
        iez_debug("IEZ_EMULATE=%s: no bandwidth table (%s): I/O is not slowed", root, strerror(errno));
        return;
    }
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)BW_HEADER)
        p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int keep_fd = getenv("IEZ_IO_CLASS") && *getenv("IEZ_IO_CLASS") && p != MAP_FAILED;
    if (keep_fd)
        bw.table_fd = iez_fd_above(fd); /* its locks hold this process's class slot (join_class) */
    else
        iez_sys_close(fd);
    if (p == MAP_FAILED) {
        iez_debug("IEZ_EMULATE=%s: cannot map %s: I/O is not slowed", root, path);
        return;
    }
    unsigned char *t = p;
    uint32_t no = get32(t + 12), ns = get32(t + 16);
    uint32_t nc = get32(t + 20);
    if (memcmp(t, BW_MAGIC, 8) != 0 || get32(t + 8) != 2 || no > 65536 || ns > 65536 || nc < 1 || nc > 256 ||
        (uint64_t)st.st_size < BW_HEADER + ((uint64_t)no + ns + nc) * BW_SLOT + ((uint64_t)no + 2 * ns) * nc * 8) {
        iez_debug("IEZ_EMULATE=%s: %s is not a bandwidth table this libiez reads: I/O is not slowed", root, path);
        munmap(p, (size_t)st.st_size);
        if (bw.table_fd >= 0)
            iez_sys_close(bw.table_fd);
        bw.table_fd = -1;
        return;
    }
    void *f = mmap(NULL, sizeof(struct bw_file) * BW_FDS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f == MAP_FAILED) {
        munmap(p, (size_t)st.st_size);
        if (bw.table_fd >= 0)
            iez_sys_close(bw.table_fd);
        bw.table_fd = -1;
        return;
    }
    uint64_t w;
    memcpy(&w, t + 24, sizeof w);
    if (w > 0)
        bw.window = (double)w;
    bw.table = t;
    bw.nost_slots = no;
    bw.noss_slots = ns;
    bw.nclasses = nc;
    bw.classes = t + BW_HEADER + ((size_t)no + ns) * BW_SLOT;
    bw.lanes = (uint64_t *)(void *)(bw.classes + (size_t)nc * BW_SLOT);
    bw.limits = (const unsigned char *)(bw.lanes + ((size_t)no + ns) * nc);
    {
        uint64_t base = BW_HEADER + ((uint64_t)no + ns + nc) * BW_SLOT + ((uint64_t)no + 2 * ns) * nc * 8;
        if ((uint64_t)st.st_size >= base + (uint64_t)nc * BW_NAME + (uint64_t)no * nc * 16) {
            bw.class_names = t + base;
            bw.job_bytes = (uint64_t *)(void *)(t + base + (size_t)nc * BW_NAME);
        }
    }
    bw.files = f;
    const char *wv = getenv("IEZ_EMULATE_WINDOW"); /* this process's bytes in flight per server */
    if (wv && *wv) {
        char *end;
        double v = strtod(wv, &end);
        if (*end == '\0' && v >= 0 && v <= 1e12)
            bw.window = v;
        else
            iez_debug("IEZ_EMULATE_WINDOW=%s is not a byte count: the table's window", wv);
    }
    const char *k = getenv("IEZ_EMULATE_SCALE");
    if (k && *k) {
        char *end;
        double v = strtod(k, &end);
        if (*end == '\0' && v >= 1 && v <= 1e6) {
            bw.scale = v;
            bw.window *= v; /* the client's bytes in flight stand for K times as many too */
        }
        else
            iez_debug("IEZ_EMULATE_SCALE=%s is not a number from 1 to 1000000: not scaled", k);
    }
    join_class();
    iez_bw_on = 1;
}

/* The layout of the file just opened on fd, kept for its I/O (nothing when it has none). */
void iez_bw_opened(int fd)
{
    if (fd < 0 || fd >= BW_FDS)
        return;
    int saved = errno;
    struct bw_file *bf = &bw.files[fd];
    bf->active = 0;
    bf->pending = 0;
    char *text = iez_tmp_alloc(IEZ_TEMPLATE_MAX);
    struct iez_layout *l = text ? iez_tmp_alloc(sizeof *l) : NULL;
    ssize_t n = l ? fgetxattr(fd, iez_cfg()->xattr_name, text, IEZ_TEMPLATE_MAX) : -1;
    if (n > 0 && iez_layout_parse(text, (size_t)n, l) == 0) {
        int ok = 1, used = 0;
        if (l->ncomps == 0) {
            ok = l->stripe_count >= 1 && l->stripe_count <= BW_OSTS;
            bf->ncomps = 1;
            bf->comps[0] = (struct bw_comp){ 0, UINT64_MAX, l->stripe_size, (uint16_t)l->stripe_count, 0, 0 };
            bf->write_mirror = bf->read_mirror = 0;
            for (int i = 0; ok && i < l->stripe_count; i++)
                bf->osts[i] = (uint16_t)l->osts[i];
        } else {
            ok = l->ncomps <= BW_COMPS;
            bf->ncomps = l->ncomps;
            bf->write_mirror = l->comps[0].mirror;
            bf->read_mirror = 0;
            for (int c = 0; c < l->ncomps && c < BW_COMPS; c++) {
                const struct iez_comp *comp = &l->comps[c];
                if (comp->mirror && (comp->mirror_flags & IEZ_MIRROR_PREFER))
                    bf->read_mirror = comp->mirror;
            }
            for (int c = 0; !bf->read_mirror && c < l->ncomps && c < BW_COMPS; c++)
                if (!(l->comps[c].mirror_flags & IEZ_MIRROR_STALE))
                    bf->read_mirror = l->comps[c].mirror;
            if (!bf->read_mirror)
                bf->read_mirror = bf->write_mirror;
            for (int c = 0; ok && c < l->ncomps; c++) {
                const struct iez_comp *comp = &l->comps[c];
                int count = comp->nosts > 0 && comp->stripe_size > 0 ? comp->nosts : 0;
                ok = used + count <= BW_OSTS;
                bf->comps[c] = (struct bw_comp){ comp->start, comp->end, comp->stripe_size, (uint16_t)count,
                                                 (uint16_t)used, comp->mirror };
                for (int i = 0; ok && i < count; i++)
                    bf->osts[used + i] = (uint16_t)l->osts[comp->first_ost + i];
                used += count;
            }
        }
        bf->active = ok;
        if (ok && fd > __atomic_load_n(&bw.high_fd, __ATOMIC_RELAXED))
            __atomic_store_n(&bw.high_fd, fd, __ATOMIC_RELAXED);
        if (!ok)
            iez_debug("descriptor %d: a layout wider than emulated bandwidth follows: not slowed", fd);
    }
    iez_tmp_free(text);
    errno = saved;
}

void iez_bw_copied(int oldfd, int newfd)
{
    if (oldfd >= 0 && oldfd < BW_FDS && newfd >= 0 && newfd < BW_FDS && oldfd != newfd) {
        bw.files[newfd] = bw.files[oldfd];
        if (bw.files[newfd].active && newfd > __atomic_load_n(&bw.high_fd, __ATOMIC_RELAXED))
            __atomic_store_n(&bw.high_fd, newfd, __ATOMIC_RELAXED);
    }
}

void iez_bw_forget(int fd)
{
    if (fd >= 0 && fd < BW_FDS && bw.files[fd].active) {
        int saved = errno;
        bw.files[fd].active = 0;
        sleep_until(bw.files[fd].pending); /* close returns when what it sent is served */
        errno = saved;
    }
}

void iez_bw_forget_range(unsigned first, unsigned last)
{
    /* only up to the highest descriptor ever tracked: closefrom(3) must not touch (and so allocate)
     * the whole 65,536-entry table */
    int high = __atomic_load_n(&bw.high_fd, __ATOMIC_RELAXED);
    for (unsigned fd = first; (int)fd <= high && fd <= last; fd++)
        bw.files[fd].active = 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The rate class c gets on server `server` (rate bytes/s) with the classes busy there at `now`:
 * weights share it, caps bound it, what capped classes leave goes to the others (water-filling). */
static double class_rate(uint32_t server, uint32_t c, double rate, uint64_t now)
{
    double weight[256], cap[256];
    uint32_t who[256];
    int n = 0;
    const uint64_t *lane = bw.lanes + (size_t)server * bw.nclasses;
    for (uint32_t k = 0; k < bw.nclasses; k++) {
        if (k != c && __atomic_load_n(&lane[k], __ATOMIC_RELAXED) <= now)
            continue; /* idle here: takes nothing */
        const unsigned char *slot = bw.classes + (size_t)k * BW_SLOT;
        double w = get_f64(slot + 8), f = get_f64(slot + 16);
        weight[n] = w > 0 ? w : 1.0;
        cap[n] = f > 0 && f <= 1 ? f * rate : rate;
        if (server >= bw.nost_slots) { /* an OSS's TBF rule limits the class's rate through its ost_io service */
            double tbf;
            memcpy(&tbf, bw.limits + ((size_t)(server - bw.nost_slots) * bw.nclasses + k) * 8, sizeof tbf);
            if (tbf > 0 && tbf < cap[n])
                cap[n] = tbf;
        }
        who[n++] = k;
    }
    double left = rate;
    int fixed[256] = { 0 };
    for (int round = 0; round <= n; round++) {
        double sum = 0;
        for (int i = 0; i < n; i++)
            if (!fixed[i])
                sum += weight[i];
        if (sum <= 0)
            break;
        int changed = 0;
        for (int i = 0; i < n; i++) {
            if (!fixed[i] && cap[i] < left * weight[i] / sum) {
                fixed[i] = 1; /* held at its cap: the rest is shared again */
                left -= cap[i];
                changed = 1;
            }
        }
        if (!changed) {
            for (int i = 0; i < n; i++)
                if (who[i] == c)
                    return fixed[i] ? cap[i] : left * weight[i] / sum;
        }
    }
    for (int i = 0; i < n; i++)
        if (who[i] == c)
            return cap[i];
    return rate;
}

/* Reserves `bytes` of server `server` (its slot) for this process's class from `start` on, after
 * what that class is already busy with there; returns when that ends, and in *ret when the caller
 * may go on (the window's worth of it still in flight). */
static uint64_t reserve(uint32_t server, unsigned char *slot, uint64_t bytes, uint64_t start, uint64_t *ret)
{
    double rate = slot_rate(slot);
    *ret = start;
    if (!(rate > 0) || !(get32(slot + 12) & 1))
        return start;
    double r = class_rate(server, bw.my_class, rate, start);
    uint64_t need = (uint64_t)((double)bytes / r * 1e9);
    uint64_t *busy = bw.lanes + (size_t)server * bw.nclasses + bw.my_class;
    uint64_t old = __atomic_load_n(busy, __ATOMIC_RELAXED), end;
    /* A busy-until beyond what the bytes in flight could justify is not trusted (issue 31 item 3): a
     * table kept across a reboot (CLOCK_MONOTONIC restarts), processes in another time namespace, a
     * corrupted table. Legitimately a lane is at most every writer's window ahead: BW_TRUSTED_WRITERS
     * windows at this class's rate, and never less than BW_TRUSTED_MIN_S. Past that the lane starts
     * afresh at `start`, so a call never waits longer than its own bytes plus that backlog. */
    double trusted_s = (double)BW_TRUSTED_WRITERS * bw.window / r;
    if (trusted_s < BW_TRUSTED_MIN_S)
        trusted_s = BW_TRUSTED_MIN_S;
    uint64_t horizon = start + (uint64_t)(trusted_s * 1e9);
    do {
        end = (old > start && old <= horizon ? old : start) + need;
    } while (!__atomic_compare_exchange_n(busy, &old, end, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
    uint64_t slack = (uint64_t)(bw.window / r * 1e9);
    *ret = end > start + slack ? end - slack : start;
    return end;
}

/* Bytes of [0, x) of a component (relative offsets) that lie on its OST number i (RAID-0). */
static uint64_t below(uint64_t x, uint64_t ss, uint64_t count, uint64_t i)
{
    uint64_t row = ss * count, in_row = x % row;
    uint64_t part = in_row > i * ss ? in_row - i * ss : 0;
    return x / row * ss + (part < ss ? part : ss);
}

/* Bytes [off, off + len) of component c, per OST slot of the descriptor, added to per[]. */
static void split(const struct bw_comp *c, uint64_t off, uint64_t len, uint64_t *per)
{
    uint64_t lo = off > c->start ? off : c->start;
    uint64_t hi = off + len < c->end ? off + len : c->end;
    if (lo >= hi || c->count == 0 || c->stripe_size == 0)
        return;
    for (uint64_t i = 0; i < c->count; i++)
        per[c->first + i] += below(hi - c->start, c->stripe_size, c->count, i) -
                             below(lo - c->start, c->stripe_size, c->count, i);
}

static void sleep_until(uint64_t t)
{
    if (t > now_ns()) {
        struct timespec until = { (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
        }
    }
}

int iez_bw_set_mirror(int fd, unsigned long mirror)
{
    if (fd < 0 || fd >= BW_FDS || !bw.files[fd].active)
        return -1;
    struct bw_file *bf = &bw.files[fd];
    for (int c = 0; c < bf->ncomps; c++)
        if (bf->comps[c].mirror && bf->comps[c].mirror == mirror) {
            bf->read_mirror = bf->write_mirror = (unsigned char)mirror;
            return 0;
        }
    return -1;
}

struct io_args {
    int fd, writing;
    int64_t off, len;
    uint64_t started_ns, go_on;
};

/* Reserves the call's share of each OST and OSS; a->go_on is when the caller may return. */
static void reserve_io(void *p)
{
    struct io_args *a = p;
    int fd = a->fd, writing = a->writing;
    int64_t off = a->off, len = a->len;
    uint64_t started_ns = a->started_ns;
    const struct bw_file *bf = &bw.files[fd];
    uint64_t per[BW_OSTS] = { 0 };
    if (bw.scale != 1.0) {
        off = (int64_t)((double)off * bw.scale);
        len = (int64_t)((double)len * bw.scale);
    }
    unsigned char mirror = writing ? bf->write_mirror : bf->read_mirror;
    for (int c = 0; c < bf->ncomps; c++)
        if (bf->comps[c].mirror == mirror) /* one copy serves the call (all components when unmirrored) */
            split(&bf->comps[c], (uint64_t)off, (uint64_t)len, per);
    int nosts = 0;
    for (int c = 0; c < bf->ncomps; c++)
        if (bf->comps[c].first + bf->comps[c].count > nosts)
            nosts = bf->comps[c].first + bf->comps[c].count;
    uint64_t done = started_ns, go_on = started_ns, ret;
    uint64_t oss_bytes[64] = { 0 };
    uint32_t oss_ids[64];
    int noss = 0;
    for (int i = 0; i < nosts; i++) {
        if (!per[i])
            continue;
        unsigned char *slot = ost_slot(bf->osts[i]);
        if (!slot)
            continue;
        /* the OST counts what it served, as an obdfilter's read_bytes/write_bytes do (the emulator
         * publishes them in the OST's stats file, so the agents and the MDS see real traffic) */
        __atomic_add_fetch((uint64_t *)(void *)(slot + (writing ? 24 : 16)), per[i], __ATOMIC_RELAXED);
        if (bw.job_bytes) /* and per job (I/O class), as its job_stats do */
            __atomic_add_fetch(&bw.job_bytes[((size_t)bf->osts[i] * bw.nclasses + bw.my_class) * 2 + (writing ? 1 : 0)],
                               per[i], __ATOMIC_RELAXED);
        uint64_t end = reserve(bf->osts[i], slot, per[i], started_ns, &ret);
        if (end > done)
            done = end;
        if (ret > go_on)
            go_on = ret;
        uint32_t oss = get32(slot + 8);
        int k = 0;
        while (k < noss && oss_ids[k] != oss)
            k++;
        if (k == noss && noss < 64)
            oss_ids[noss++] = oss;
        if (k < noss)
            oss_bytes[k] += per[i];
    }
    for (int k = 0; k < noss; k++) {
        unsigned char *slot = oss_slot(oss_ids[k]);
        if (slot) {
            uint64_t end = reserve(bw.nost_slots + oss_ids[k], slot, oss_bytes[k], started_ns, &ret);
            if (end > done)
                done = end;
            if (ret > go_on)
                go_on = ret;
        }
    }
    struct bw_file *w = &bw.files[fd];
    if (done > w->pending)
        w->pending = done;
    a->go_on = go_on;
}

void iez_bw_io(int fd, int64_t off, int64_t len, uint64_t started_ns, int writing)
{
    if (fd < 0 || fd >= BW_FDS || len <= 0 || off < 0 || !bw.files[fd].active)
        return;
    int saved = errno;
    struct io_args a = { fd, writing, off, len, started_ns, started_ns };
    if (iez_on_stack(reserve_io, &a) != 0) /* its tables take ~8 KiB: libiez's stack, not the caller's */
        reserve_io(&a);
    sleep_until(a.go_on); /* on the caller's stack: a handler meanwhile finds libiez's stack free */
    errno = saved;
}

uint64_t iez_bw_now(void)
{
    return iez_bw_on ? now_ns() : 0;
}

int iez_bw_tracked(int fd)
{
    return iez_bw_on && fd >= 0 && fd < BW_FDS && bw.files[fd].active;
}
