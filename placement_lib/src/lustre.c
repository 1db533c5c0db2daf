/* Layouts on a real Lustre client. Applying: LL_IOC_LOV_SETSTRIPE on a file
 * opened with O_LOV_DELAY_CREATE, with LOV_USER_MAGIC_SPECIFIC so Lustre takes
 * the exact OST list instead of choosing its own (per component of a
 * composite layout). Reading: LL_IOC_LOV_GETSTRIPE on a file (its layout, for
 * traces) or on a directory (its default, for the skip check). All buffers
 * are built and read with memcpy: the structures are packed. */
#include "iez.h"
#include "lustre.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

/* Whether this process could see a Lustre file system: 1 when /proc/self/mounts lists one (or
 * cannot be read), 0 when it lists none. Read once when the library is loaded: a new file's
 * O_LOV_DELAY_CREATE must be chosen before its open, and without a Lustre mount the create
 * path then needs no statfs at all. Lustre mounted after a process started is not seen by it. */
static int lustre_mounted = -1;

static int scan_mounts(void)
{
    int fd = iez_sys_open("/proc/self/mounts", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 1;
    /* the type is the third field; only it can be exactly " lustre " (the device is the first
     * field, the mount point starts with '/', and spaces in names are escaped as \040) */
    static const char needle[] = " lustre ";
    const size_t keep = sizeof needle - 2;
    char buf[4096 + sizeof needle];
    size_t have = 0;
    int found = 0;
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            found = 1; /* cannot tell: assume it could be there */
            break;
        }
        if (n == 0)
            break;
        have += (size_t)n;
        buf[have] = '\0';
        if (strstr(buf, needle)) {
            found = 1;
            break;
        }
        if (have > keep) { /* carry the tail over: the needle may span two reads */
            memmove(buf, buf + have - keep, keep);
            have = keep;
        }
    }
    iez_sys_close(fd);
    return found;
}

void iez_lustre_scan_mounts(void)
{
    int saved = errno;
    const char *assume = getenv("IEZ_ASSUME_LUSTRE"); /* diagnostics and tests: the Lustre-client path */
    lustre_mounted = assume && strcmp(assume, "1") == 0 ? 1 : scan_mounts();
    errno = saved;
}

int iez_lustre_mounted(void)
{
    if (__atomic_load_n(&lustre_mounted, __ATOMIC_RELAXED) < 0)
        iez_lustre_scan_mounts();
    return lustre_mounted;
}

int iez_is_lustre_dir(const char *abspath_of_file)
{
    char dir[IEZ_PATH_MAX];
    size_t n = strlen(abspath_of_file);
    if (n >= sizeof dir)
        return 0;
    memcpy(dir, abspath_of_file, n + 1);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 0;
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    struct statfs fs;
    if (statfs(dir, &fs) != 0)
        return 0;
    return (unsigned long)fs.f_type == (unsigned long)IEZ_LL_SUPER_MAGIC;
}

/* ---- LL_IOC_LOV_SETSTRIPE --------------------------------------------- */

/* Bytes of a component's lov_user_md_v3: the header, and one lov_user_ost_data_v1 per chosen OST. */
static size_t sub_size(const struct iez_comp *c)
{
    return sizeof(struct iez_lov_user_md_v3) + (size_t)(c->dom ? 0 : c->nosts) * sizeof(struct iez_lov_user_ost_data_v1);
}

/* Whether Lustre's fields can hold c: stripe sizes in 32 bits and in 64 KiB units, counts in 16. */
static int comp_fits(const struct iez_comp *c, const uint32_t *osts)
{
    uint64_t size = c->dom && c->stripe_size == 0 ? c->end : c->stripe_size;
    if (size > 0xffffffffULL || size % IEZ_LOV_MIN_STRIPE_SIZE != 0)
        return 0;
    if (c->dom)
        return size != 0; /* Data-on-MDT: its stripe size is its extent, which must end */
    if (c->stripe_count == 0 || c->stripe_count < -1 || c->stripe_count >= IEZ_LOV_ALL_STRIPES)
        return 0;
    if (c->nosts)
        return size != 0 && c->nosts == c->stripe_count && c->nosts <= IEZ_LOV_MAX_STRIPE_COUNT &&
               osts[c->first_ost] < IEZ_LOV_OFFSET_DEFAULT;
    return 1;
}

/* One component's lov_user_md_v3 at `at` (sub_size bytes, zeroed): LOV_USER_MAGIC_SPECIFIC with the
 * OSTs iez chose, else LOV_USER_MAGIC_V3 with stripe offset -1 so that Lustre chooses when it
 * instantiates the component; the pool name in both; the Data-on-MDT pattern with no objects. */
static void fill_sub(unsigned char *at, const struct iez_comp *c, const uint32_t *osts)
{
    struct iez_lov_user_md_v3 lum;
    memset(&lum, 0, sizeof lum);
    lum.lmm_magic = c->nosts && !c->dom ? IEZ_LOV_USER_MAGIC_SPECIFIC : IEZ_LOV_USER_MAGIC_V3;
    lum.lmm_stripe_offset = IEZ_LOV_OFFSET_DEFAULT;
    if (c->dom) {
        lum.lmm_pattern = IEZ_LOV_PATTERN_MDT;
        lum.lmm_stripe_size = (uint32_t)(c->stripe_size ? c->stripe_size : c->end);
        lum.lmm_stripe_count = 0;
        /* no pool: a pool names OSTs, and this component lives on the MDT */
    } else {
        lum.lmm_pattern = IEZ_LOV_PATTERN_RAID0 | (c->overstripe ? IEZ_LOV_PATTERN_OVERSTRIPING : 0);
        lum.lmm_stripe_size = (uint32_t)c->stripe_size;
        lum.lmm_stripe_count = c->stripe_count == -1 ? IEZ_LOV_ALL_STRIPES : (uint16_t)c->stripe_count;
        if (c->nosts)
            lum.lmm_stripe_offset = (uint16_t)osts[c->first_ost];
        memcpy(lum.lmm_pool_name, c->pool, strnlen(c->pool, IEZ_LOV_MAXPOOLNAME));
    }
    memcpy(at, &lum, sizeof lum);
    if (c->dom)
        return;
    for (int i = 0; i < c->nosts; i++) {
        struct iez_lov_user_ost_data_v1 obj;
        memset(&obj, 0, sizeof obj);
        obj.l_ost_idx = osts[c->first_ost + i];
        memcpy(at + sizeof lum + (size_t)i * sizeof obj, &obj, sizeof obj);
    }
}

/* A plain layout as the one component it is; also what a composite layout of one
 * component over the whole file is applied as (lfs setstripe without -E). */
static int as_whole(const struct iez_layout *l, struct iez_comp *whole)
{
    if (l->ncomps == 0) {
        if (l->stripe_count < 1 || l->stripe_size == 0)
            return 0;
        memset(whole, 0, sizeof *whole);
        whole->end = IEZ_EOF;
        whole->stripe_size = l->stripe_size;
        whole->stripe_count = whole->nosts = l->stripe_count;
        return 1;
    }
    if (l->ncomps == 1 && l->comps[0].start == 0 && l->comps[0].end == IEZ_EOF && !l->comps[0].dom) {
        *whole = l->comps[0];
        return 1;
    }
    return 0;
}

long iez_lustre_lum_size(const struct iez_layout *l)
{
    struct iez_comp whole;
    if (as_whole(l, &whole))
        return comp_fits(&whole, l->osts) ? (long)sub_size(&whole) : -1;
    if (l->ncomps < 1 || l->ncomps > IEZ_MAX_COMPS)
        return -1;
    size_t size = sizeof(struct iez_lov_comp_md_v1) + (size_t)l->ncomps * sizeof(struct iez_lov_comp_md_entry_v1);
    for (int i = 0; i < l->ncomps; i++) {
        if (!comp_fits(&l->comps[i], l->osts))
            return -1;
        size += sub_size(&l->comps[i]);
    }
    return (long)size;
}

long iez_lustre_build_lum(const struct iez_layout *l, void *buf, size_t buflen)
{
    long need = iez_lustre_lum_size(l);
    if (need < 0 || buflen < (size_t)need)
        return -1;
    unsigned char *out = buf;
    memset(out, 0, (size_t)need);
    struct iez_comp whole;
    if (as_whole(l, &whole)) {
        fill_sub(out, &whole, l->osts);
        return need;
    }
    struct iez_lov_comp_md_v1 head;
    memset(&head, 0, sizeof head);
    head.lcm_magic = IEZ_LOV_USER_MAGIC_COMP_V1;
    head.lcm_size = (uint32_t)need;
    head.lcm_entry_count = (uint16_t)l->ncomps;
    head.lcm_mirror_count = (uint16_t)(l->nmirrors ? l->nmirrors - 1 : 0); /* FLR: mirrors less one */
    if (l->nmirrors)
        head.lcm_flags = IEZ_LCM_FL_RDONLY; /* as lfs mirror create: every mirror in sync, none written yet */
    memcpy(out, &head, sizeof head);
    size_t offset = sizeof head + (size_t)l->ncomps * sizeof(struct iez_lov_comp_md_entry_v1);
    for (int i = 0; i < l->ncomps; i++) {
        const struct iez_comp *c = &l->comps[i];
        struct iez_lov_comp_md_entry_v1 e;
        memset(&e, 0, sizeof e); /* component id 0: Lustre numbers them; the mirror id in bits 30..16 (FLR) */
        e.lcme_id = (uint32_t)c->mirror << IEZ_MIRROR_ID_SHIFT;
        if (c->mirror_flags & IEZ_MIRROR_PREFER)
            e.lcme_flags = IEZ_LCME_FL_PREF_RD; /* stale is Lustre's to set, when a write leaves a mirror behind */
        e.lcme_extent.e_start = c->start;
        e.lcme_extent.e_end = c->end == IEZ_EOF ? IEZ_LUSTRE_EOF : c->end;
        e.lcme_offset = (uint32_t)offset;
        e.lcme_size = (uint32_t)sub_size(c);
        memcpy(out + sizeof head + (size_t)i * sizeof e, &e, sizeof e);
        fill_sub(out + offset, c, l->osts);
        offset += e.lcme_size;
    }
    return need;
}

int iez_lustre_setstripe(int fd, const struct iez_layout *l)
{
    long len = iez_lustre_lum_size(l);
    if (len < 0) {
        errno = EINVAL;
        return -1;
    }
    void *buf = iez_tmp_alloc((size_t)len); /* no malloc on the create path (scratch.c) */
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    int rc = -1;
    if (iez_lustre_build_lum(l, buf, (size_t)len) > 0)
        rc = ioctl(fd, IEZ_LL_IOC_LOV_SETSTRIPE, buf);
    else
        errno = EINVAL;
    iez_tmp_free(buf);
    return rc;
}

/* ---- LL_IOC_LOV_GETSTRIPE --------------------------------------------- */

/* One lov_user_md (v1, v3) of n bytes into c; its objects' OSTs when `objects`. */
static int parse_sub(const unsigned char *p, size_t n, struct iez_comp *c, struct iez_layout *l, int objects)
{
    struct iez_lov_user_md_v3 lum;
    size_t header;
    if (n < sizeof(struct iez_lov_user_md_v1))
        return -1;
    memset(&lum, 0, sizeof lum);
    memcpy(&lum, p, sizeof(struct iez_lov_user_md_v1));
    if (lum.lmm_magic == IEZ_LOV_USER_MAGIC_V1) {
        header = sizeof(struct iez_lov_user_md_v1);
    } else if (lum.lmm_magic == IEZ_LOV_USER_MAGIC_V3 || lum.lmm_magic == IEZ_LOV_USER_MAGIC_SPECIFIC) {
        header = sizeof(struct iez_lov_user_md_v3);
        if (n < header)
            return -1;
        memcpy(&lum, p, header);
    } else {
        return -1; /* foreign, or unknown */
    }
    size_t plen = strnlen(lum.lmm_pool_name, sizeof lum.lmm_pool_name);
    if (plen > IEZ_POOL_MAX)
        return -1;
    for (size_t i = 0; i < plen; i++) {
        char ch = lum.lmm_pool_name[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
              ch == '-'))
            return -1;
    }
    uint32_t pattern = lum.lmm_pattern & ~(uint32_t)(IEZ_LOV_PATTERN_F_RELEASED | IEZ_LOV_PATTERN_F_HOLE);
    int released = (lum.lmm_pattern & IEZ_LOV_PATTERN_F_RELEASED) != 0;
    c->stripe_size = lum.lmm_stripe_size;
    c->first_ost = l->nosts;
    c->nosts = 0;
    if (pattern == IEZ_LOV_PATTERN_MDT) {
        c->dom = 1;
        c->stripe_count = 0;
        return 0;
    }
    if (pattern != IEZ_LOV_PATTERN_RAID0 && pattern != (IEZ_LOV_PATTERN_RAID0 | IEZ_LOV_PATTERN_OVERSTRIPING))
        return -1;
    c->overstripe = (pattern & IEZ_LOV_PATTERN_OVERSTRIPING) != 0;
    memcpy(c->pool, lum.lmm_pool_name, plen);
    c->pool[plen] = '\0';
    if (lum.lmm_stripe_count >= IEZ_LOV_ALL_STRIPES_WIDE && lum.lmm_stripe_count != IEZ_LOV_ALL_STRIPES)
        return -1; /* "N stripes per OST" (lfs setstripe -C -N): the text has no such count */
    c->stripe_count = lum.lmm_stripe_count == IEZ_LOV_ALL_STRIPES ? -1 : lum.lmm_stripe_count;
    if (objects && !released && c->stripe_count > 0) {
        int count = c->stripe_count;
        if (header + (size_t)count * sizeof(struct iez_lov_user_ost_data_v1) > n ||
            l->nosts + count > IEZ_MAX_STRIPES)
            return -1;
        for (int i = 0; i < count; i++) {
            struct iez_lov_user_ost_data_v1 obj;
            memcpy(&obj, p + header + (size_t)i * sizeof obj, sizeof obj);
            l->osts[l->nosts + i] = obj.l_ost_idx;
        }
        c->nosts = count;
        l->nosts += count;
    }
    if (c->stripe_count == 0)
        c->stripe_count = 1; /* the file system's default count (lov.stripecount), 1 unless changed: as iez.layout.lustre */
    return 0;
}

static int parse_comp_md(const unsigned char *p, size_t len, struct iez_layout *l, int with_osts)
{
    struct iez_lov_comp_md_v1 head;
    if (len < sizeof head)
        return -1;
    memcpy(&head, p, sizeof head);
    size_t size = head.lcm_size, entries = head.lcm_entry_count;
    size_t first = sizeof head + entries * sizeof(struct iez_lov_comp_md_entry_v1);
    if (size > len || entries == 0 || first > size)
        return -1;
    uint32_t mirror = 0;
    int nmirrors = 0;
    for (size_t i = 0; i < entries; i++) {
        struct iez_lov_comp_md_entry_v1 e;
        memcpy(&e, p + sizeof head + i * sizeof e, sizeof e);
        if (head.lcm_mirror_count && (i == 0 || (e.lcme_id & IEZ_MIRROR_ID_MASK) != mirror)) {
            /* FLR: entries come mirror by mirror; each becomes mirror 1, 2, ... of the text (version 3) */
            mirror = e.lcme_id & IEZ_MIRROR_ID_MASK;
            if (++nmirrors > IEZ_MAX_MIRRORS)
                return -1;
        }
        if (e.lcme_flags & IEZ_LCME_FL_EXTENSION)
            return -1; /* self-extending layouts have no text */
        if (l->ncomps >= IEZ_MAX_COMPS || e.lcme_offset < first || e.lcme_offset > size ||
            e.lcme_size > size - e.lcme_offset)
            return -1;
        struct iez_comp *c = &l->comps[l->ncomps];
        memset(c, 0, sizeof *c);
        c->start = e.lcme_extent.e_start;
        c->end = e.lcme_extent.e_end == IEZ_LUSTRE_EOF ? IEZ_EOF : e.lcme_extent.e_end;
        if (c->end <= c->start ||
            parse_sub(p + e.lcme_offset, e.lcme_size, c, l, with_osts && (e.lcme_flags & IEZ_LCME_FL_INIT)))
            return -1;
        c->mirror = (unsigned char)nmirrors;
        c->mirror_flags = (unsigned char)((e.lcme_flags & IEZ_LCME_FL_PREF_RD ? IEZ_MIRROR_PREFER : 0) |
                                          (e.lcme_flags & IEZ_LCME_FL_STALE ? IEZ_MIRROR_STALE : 0));
        l->ncomps++;
    }
    /* each mirror (or the one layout): from 0, each component where the one before ends */
    for (int i = 0; i < l->ncomps; i++) {
        int starts = i == 0 || l->comps[i].mirror != l->comps[i - 1].mirror;
        if (starts ? l->comps[i].start != 0
                  : l->comps[i - 1].end == IEZ_EOF || l->comps[i].start != l->comps[i - 1].end)
            return -1;
    }
    if (nmirrors == 1) { /* one mirror left (after lfs mirror split): a plain composite layout */
        for (int i = 0; i < l->ncomps; i++)
            l->comps[i].mirror = l->comps[i].mirror_flags = 0;
    } else if (nmirrors > 1) {
        int prefer = 0, stale = 1;
        for (int i = 0; i < l->ncomps; i++) {
            if (l->comps[i].mirror_flags & IEZ_MIRROR_PREFER) {
                if (prefer && prefer != l->comps[i].mirror)
                    l->comps[i].mirror_flags &= (unsigned char)~IEZ_MIRROR_PREFER; /* the text marks one */
                else
                    prefer = l->comps[i].mirror;
            }
        }
        /* a mirror is stale when any of its components is (Lustre marks them one by one) */
        for (int m = 1; m <= nmirrors; m++) {
            int any = 0;
            for (int i = 0; i < l->ncomps; i++)
                any |= l->comps[i].mirror == m && (l->comps[i].mirror_flags & IEZ_MIRROR_STALE);
            for (int i = 0; i < l->ncomps; i++)
                if (l->comps[i].mirror == m) {
                    l->comps[i].mirror_flags = (unsigned char)((l->comps[i].mirror_flags & ~IEZ_MIRROR_STALE) |
                                                               (any ? IEZ_MIRROR_STALE : 0));
                    if (prefer && m != prefer)
                        l->comps[i].mirror_flags &= (unsigned char)~IEZ_MIRROR_PREFER;
                }
            stale &= any;
        }
        if (stale)
            return -1; /* every mirror stale: no copy holds the file */
        l->nmirrors = nmirrors;
    }
    return 0;
}

int iez_lustre_parse_lum(const void *buf, size_t len, struct iez_layout *l, int with_osts)
{
    const unsigned char *p = buf;
    uint32_t magic;
    l->ncomps = l->nosts = l->stripe_count = l->nmirrors = 0;
    l->stripe_size = 0;
    if (len < sizeof magic)
        return -1;
    memcpy(&magic, p, sizeof magic);
    int rc;
    if (magic == IEZ_LOV_USER_MAGIC_COMP_V1) {
        rc = parse_comp_md(p, len, l, with_osts);
    } else {
        struct iez_comp *c = &l->comps[0];
        memset(c, 0, sizeof *c);
        c->end = IEZ_EOF;
        rc = parse_sub(p, len, c, l, with_osts);
        if (rc == 0 && with_osts && !c->nosts)
            rc = -1; /* a file's plain layout without objects (none yet, HSM released): no layout to tell */
        if (rc == 0)
            l->ncomps = 1;
    }
    if (rc)
        return -1;
    /* the file's stripe count and size: its last component with objects (the one its end is in), of its
     * first mirror */
    for (int i = 0; i < l->ncomps; i++)
        if (l->comps[i].nosts && (!l->nmirrors || l->comps[i].mirror == 1)) {
            l->stripe_count = l->comps[i].nosts;
            l->stripe_size = l->comps[i].stripe_size;
        }
    const struct iez_comp *c = &l->comps[0];
    if (l->ncomps == 1 && !l->nmirrors && !c->dom && !c->pool[0] && !c->overstripe && c->nosts && c->stripe_size) {
        /* a plain RAID-0 layout without pool: the version-1 text, as iez.layout.emulated.format_attr */
        l->ncomps = 0;
        l->stripe_count = c->nosts;
    }
    return 0;
}

int iez_lustre_getlayout(int fd, struct iez_layout *l, int with_osts)
{
    /* The kernel reads the magic and the room we left (in stripes) before it writes. */
    size_t len = 65536;
    unsigned char *buf = iez_tmp_alloc(len); /* no malloc on the create path (scratch.c) */
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    memset(buf, 0, len);
    struct iez_lov_user_md_v3 lum;
    memset(&lum, 0, sizeof lum);
    lum.lmm_magic = IEZ_LOV_USER_MAGIC_V3;
    lum.lmm_stripe_count = (uint16_t)((len - sizeof lum) / sizeof(struct iez_lov_user_ost_data_v1));
    memcpy(buf, &lum, sizeof lum);
    int rc = ioctl(fd, IEZ_LL_IOC_LOV_GETSTRIPE, buf);
    if (rc == 0 && iez_lustre_parse_lum(buf, len, l, with_osts) != 0)
        rc = -2;
    int err = errno;
    iez_tmp_free(buf);
    errno = err;
    return rc;
}
