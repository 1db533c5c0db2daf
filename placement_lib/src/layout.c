/* The layout text (placement_lib/README.md "Formats"): what the emulation
 * stores in the user.iez.layout attribute, the sidecar log where user
 * attributes are refused, and directories' default layouts as the canonical
 * template text the skip check compares. */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* ---- formatting ------------------------------------------------------ */

size_t iez_layout_text_cap(const struct iez_layout *l)
{
    /* per component: "comp=" + three 20-digit numbers + count + "mdt" + ":pool=" + 15 + ":overstripe" */
    int ncomps = l->ncomps > 0 ? l->ncomps : 1;
    int nosts = l->ncomps > 0 ? l->nosts : l->stripe_count;
    /* a mirrored layout adds per component at most " mirror=N:prefer:stale" */
    return 64 + (size_t)ncomps * 160 + (size_t)(nosts > 0 ? nosts : 0) * 11;
}

/* Appends to out at *n; -1 once it does not fit (nothing is ever truncated silently). */
static int add(char *out, size_t outlen, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int add(char *out, size_t outlen, size_t *n, const char *fmt, ...)
{
    if (*n >= outlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(out + *n, outlen - *n, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)m >= outlen - *n)
        return -1;
    *n += (size_t)m;
    return 0;
}

static int add_osts(char *out, size_t outlen, size_t *n, const uint32_t *osts, int count)
{
    for (int i = 0; i < count; i++)
        if (add(out, outlen, n, i ? ",%u" : "%u", osts[i]))
            return -1;
    return 0;
}

/* One "comp=START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS[:pool=NAME][:overstripe]" field, as
 * iez.layout.emulated.format_component writes it. */
static int add_comp(char *out, size_t outlen, size_t *n, const struct iez_comp *c, const uint32_t *osts,
                    int with_osts)
{
    char end[24], size[24];
    if (c->end == IEZ_EOF)
        strcpy(end, "eof");
    else
        snprintf(end, sizeof end, "%llu", (unsigned long long)c->end);
    if (c->stripe_size == 0)
        strcpy(size, "-");
    else
        snprintf(size, sizeof size, "%llu", (unsigned long long)c->stripe_size);
    if (add(out, outlen, n, " comp=%llu:%s:%s:%d:", (unsigned long long)c->start, end, size,
            c->dom ? 0 : c->stripe_count))
        return -1;
    if (c->dom) {
        if (add(out, outlen, n, "mdt"))
            return -1;
    } else if (!with_osts || c->nosts == 0) {
        if (add(out, outlen, n, "-"))
            return -1;
    } else if (add_osts(out, outlen, n, osts + c->first_ost, c->nosts)) {
        return -1;
    }
    if (c->pool[0] && add(out, outlen, n, ":pool=%s", c->pool))
        return -1;
    if (c->overstripe && add(out, outlen, n, ":overstripe"))
        return -1;
    return 0;
}

/* Version 2 of l; a plain layout is one component over the whole file (Layout.as_components). */
static int format_v2(const struct iez_layout *l, char *out, size_t outlen, int with_osts)
{
    size_t n = 0;
    if (outlen == 0 || add(out, outlen, &n, "version=2"))
        return -1;
    if (l->ncomps == 0) {
        struct iez_comp whole = { .start = 0, .end = IEZ_EOF, .stripe_size = l->stripe_size,
                                  .stripe_count = l->stripe_count, .nosts = l->stripe_count, .first_ost = 0 };
        if (add_comp(out, outlen, &n, &whole, l->osts, with_osts))
            return -1;
    }
    for (int i = 0; i < l->ncomps; i++)
        if ((!l->nmirrors || l->comps[i].mirror == 1) && add_comp(out, outlen, &n, &l->comps[i], l->osts, with_osts))
            return -1;
    return (int)n;
}

/* Version 3 of a mirrored l: "mirror=ID[:prefer][:stale]" before each mirror's components (a template:
 * no flags, no OSTs), as iez.layout.emulated.format_mirrors writes it. */
static int format_v3(const struct iez_layout *l, char *out, size_t outlen, int with_osts)
{
    size_t n = 0;
    if (outlen == 0 || add(out, outlen, &n, "version=3"))
        return -1;
    int mirror = 0;
    for (int i = 0; i < l->ncomps; i++) {
        const struct iez_comp *c = &l->comps[i];
        if (c->mirror != mirror) {
            mirror = c->mirror;
            int flags = with_osts ? c->mirror_flags : 0;
            if (add(out, outlen, &n, " mirror=%d%s%s", mirror, flags & IEZ_MIRROR_PREFER ? ":prefer" : "",
                    flags & IEZ_MIRROR_STALE ? ":stale" : ""))
                return -1;
        }
        if (add_comp(out, outlen, &n, c, l->osts, with_osts))
            return -1;
    }
    return (int)n;
}

void iez_layout_mark_written(struct iez_layout *l)
{
    for (int i = 0; l->nmirrors && i < l->ncomps; i++)
        if (l->comps[i].mirror > 1)
            l->comps[i].mirror_flags |= IEZ_MIRROR_STALE;
}

static char *put_text(char *p, const char *text, size_t n)
{
    memcpy(p, text, n);
    return p + n;
}

static char *put_u64(char *p, uint64_t v)
{
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = digits[--n];
    return p;
}

/* A plain layout's version-1 text, written by hand: it is on every placed create's path, where the
 * five vsnprintf calls it took cost more than the map lookup itself. */
int iez_layout_format(const struct iez_layout *l, char *out, size_t outlen)
{
    if (l->nmirrors)
        return format_v3(l, out, outlen, 1);
    if (l->ncomps > 0)
        return format_v2(l, out, outlen, 1);
    if (outlen < 80 || l->stripe_count < 1 || (size_t)l->stripe_count > (outlen - 80) / 11)
        return -1; /* the fixed words and two numbers take under 80 bytes, each OST at most 11 */
    char *p = out;
    p = put_text(p, "version=1 stripe_size=", 22);
    p = put_u64(p, l->stripe_size);
    p = put_text(p, " stripe_count=", 14);
    p = put_u64(p, (uint64_t)l->stripe_count);
    p = put_text(p, " osts=", 6);
    for (int i = 0; i < l->stripe_count; i++) {
        if (i)
            *p++ = ',';
        p = put_u64(p, l->osts[i]);
    }
    *p = '\0';
    return (int)(p - out);
}

int iez_layout_format_v2(const struct iez_layout *l, char *out, size_t outlen)
{
    return format_v2(l, out, outlen, 1);
}

int iez_layout_template(const struct iez_layout *l, char *out, size_t outlen)
{
    if (l->nmirrors)
        return format_v3(l, out, outlen, 0);
    return format_v2(l, out, outlen, 0);
}

/* ---- parsing ---------------------------------------------------------
 * The same grammar and the same refusals as iez.layout.emulated.parse_attr
 * (tests/placement_lib/test_layouts.py holds both to one set of texts):
 * fields separated by exactly one space, whole numbers as -?[0-9]+, the
 * checks of iez.model.Component and check_components. Numbers beyond 64
 * bits, stripe counts beyond 65534 and more than IEZ_MAX_COMPS components or
 * IEZ_MAX_STRIPES OSTs, which Python would take, are refused here: no Lustre
 * layout has them. Nothing is allocated but the duplicate check of long OST
 * lists. */

struct span {
    const char *p;
    size_t n;
};

static int span_is(struct span s, const char *word)
{
    return s.n == strlen(word) && !memcmp(s.p, word, s.n);
}

/* Splits *rest at the first sep: the part before goes to *part; 0 when rest was empty. */
static int next_part(struct span *rest, char sep, struct span *part, int *more)
{
    const char *hit = memchr(rest->p, sep, rest->n);
    part->p = rest->p;
    part->n = hit ? (size_t)(hit - rest->p) : rest->n;
    *more = hit != NULL;
    if (hit) {
        rest->n -= part->n + 1;
        rest->p = hit + 1;
    } else {
        rest->p += rest->n;
        rest->n = 0;
    }
    return 1;
}

/* -?[0-9]+ as Python's re and int() read it, within 64 bits. */
static int parse_int(struct span s, int64_t *v)
{
    size_t i = 0;
    int neg = 0;
    if (s.n && s.p[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == s.n)
        return -1;
    uint64_t x = 0;
    for (; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return -1;
        unsigned d = (unsigned)(s.p[i] - '0');
        if (x > (UINT64_C(0x7fffffffffffffff) - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = neg ? -(int64_t)x : (int64_t)x;
    return 0;
}

/* iez.model.check_pool_name: 1 to 15 ASCII letters, digits, '_' or '-'. */
static int parse_pool(struct span s, char out[IEZ_POOL_MAX + 1])
{
    if (s.n == 0 || s.n > IEZ_POOL_MAX)
        return -1;
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return -1;
    }
    memcpy(out, s.p, s.n);
    out[s.n] = '\0';
    return 0;
}

/* Comma-separated non-negative OST indices into osts[at...]; their number, or -1. */
static int parse_ost_list(struct span s, uint32_t *osts, int at)
{
    int count = 0, more = 1;
    struct span part;
    while (more) {
        next_part(&s, ',', &part, &more);
        int64_t v;
        if (part.n == 0 || part.p[0] == '-' || parse_int(part, &v) || v > 0xffffffffLL ||
            at + count >= IEZ_MAX_STRIPES)
            return -1;
        osts[at + count++] = (uint32_t)v;
    }
    return count;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Whether an OST appears twice in osts[0..n). */
static int has_duplicate(const uint32_t *osts, int n)
{
    if (n <= 64) {
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++)
                if (osts[i] == osts[j])
                    return 1;
        return 0;
    }
    uint32_t *copy = iez_tmp_alloc((size_t)n * sizeof *copy); /* no malloc on the create path (scratch.c) */
    if (!copy)
        return 1; /* cannot tell: refuse rather than apply something Lustre may reject */
    memcpy(copy, osts, (size_t)n * sizeof *copy);
    qsort(copy, (size_t)n, sizeof *copy, cmp_u32);
    int dup = 0;
    for (int i = 1; i < n && !dup; i++)
        dup = copy[i] == copy[i - 1];
    iez_tmp_free(copy);
    return dup;
}

/* "START:END:STRIPE_SIZE:STRIPE_COUNT:OSTS[:pool=NAME][:overstripe]" into l->comps[l->ncomps]. */
static int parse_comp(struct span value, const char *default_pool, struct iez_layout *l)
{
    if (l->ncomps >= IEZ_MAX_COMPS)
        return -1;
    struct iez_comp *c = &l->comps[l->ncomps];
    memset(c, 0, sizeof *c);
    struct span f[5];
    int more = 1;
    for (int i = 0; i < 5; i++) {
        if (!more)
            return -1; /* fewer than five parts */
        next_part(&value, ':', &f[i], &more);
    }
    strcpy(c->pool, default_pool);
    while (more) {
        struct span extra;
        next_part(&value, ':', &extra, &more);
        if (span_is(extra, "overstripe")) {
            c->overstripe = 1;
        } else if (extra.n >= 5 && !memcmp(extra.p, "pool=", 5)) {
            if (parse_pool((struct span){ extra.p + 5, extra.n - 5 }, c->pool))
                return -1;
        } else {
            return -1;
        }
    }
    int64_t start, end, size = 0, count;
    if (parse_int(f[0], &start) || parse_int(f[3], &count) || start < 0)
        return -1;
    if (span_is(f[1], "eof"))
        end = -1;
    else if (parse_int(f[1], &end))
        return -1;
    if (end != -1 && end <= start)
        return -1;
    if (!span_is(f[2], "-") && (parse_int(f[2], &size) || size <= 0))
        return -1;
    c->start = (uint64_t)start;
    c->end = end == -1 ? IEZ_EOF : (uint64_t)end;
    c->stripe_size = (uint64_t)size;
    c->first_ost = l->nosts;
    if (span_is(f[4], "mdt")) {
        if ((count != 0 && count != 1) || start != 0)
            return -1; /* Data-on-MDT: no OSTs, and only the first component */
        c->dom = 1;
        c->stripe_count = 0;
    } else {
        if (count == 0 || count < -1 || count > 65534)
            return -1;
        c->stripe_count = (int)count;
        if (!span_is(f[4], "-")) {
            int n = parse_ost_list(f[4], l->osts, l->nosts);
            if (n < 0 || n != count || size == 0 || (!c->overstripe && has_duplicate(l->osts + l->nosts, n)))
                return -1;
            c->nosts = n;
            l->nosts += n;
        }
    }
    l->ncomps++;
    return 0;
}

/* One composite layout's fields (version 2 after "version=2", or one mirror's in version 3) appended to
 * l->comps from `first`, checked as check_components does. */
static int parse_comps(struct span rest, struct iez_layout *l, int first)
{
    char pool[IEZ_POOL_MAX + 1] = "";
    while (rest.n) {
        struct span field, key, value;
        int more;
        next_part(&rest, ' ', &field, &more);
        if (more && rest.n == 0)
            return -1; /* a trailing space: an empty field */
        value = field;
        next_part(&value, '=', &key, &more);
        if (!more)
            return -1;
        if (span_is(key, "pool") && l->ncomps == first) {
            if (parse_pool(value, pool))
                return -1;
        } else if (!span_is(key, "comp") || parse_comp(value, pool, l)) {
            return -1;
        }
    }
    if (l->ncomps == first)
        return -1;
    /* check_components: from 0, each where the one before ends, nothing after the end of the file */
    if (l->comps[first].start != 0)
        return -1;
    for (int i = first + 1; i < l->ncomps; i++)
        if (l->comps[i - 1].end == IEZ_EOF || l->comps[i].start != l->comps[i - 1].end)
            return -1;
    return 0;
}

/* The summary Layout.from_components gives of the first mirror (or the only layout): the first placed
 * component's stripe size, its OSTs. */
static void summarise(struct iez_layout *l)
{
    l->stripe_count = 0;
    for (int i = 0; i < l->ncomps; i++)
        if (!l->nmirrors || l->comps[i].mirror == 1)
            l->stripe_count += l->comps[i].nosts;
    for (int i = 0; i < l->ncomps; i++)
        if ((!l->nmirrors || l->comps[i].mirror == 1) && l->comps[i].nosts) {
            l->stripe_size = l->comps[i].stripe_size;
            break;
        }
}

static int parse_v2(struct span rest, struct iez_layout *l)
{
    if (parse_comps(rest, l, 0))
        return -1;
    summarise(l);
    return 0;
}

/* "mirror=ID[:prefer][:stale]" (ID the next mirror's) into *flags; 0, or -1 as _parse_v3 refuses it. */
static int parse_mirror_field(struct span value, int id, int *flags, int *preferred)
{
    struct span part;
    int more;
    int64_t v;
    next_part(&value, ':', &part, &more);
    if (parse_int(part, &v) || v != id)
        return -1;
    *flags = 0;
    while (more) {
        next_part(&value, ':', &part, &more);
        if (span_is(part, "prefer") && !*preferred) {
            *preferred = 1;
            *flags |= IEZ_MIRROR_PREFER;
        } else if (span_is(part, "stale") && !(*flags & IEZ_MIRROR_STALE)) {
            *flags |= IEZ_MIRROR_STALE;
        } else {
            return -1;
        }
    }
    return 0;
}

/* The components of the mirror whose fields are chunk, numbered id with flags. */
static int parse_mirror(struct span chunk, struct iez_layout *l, int id, int flags)
{
    int first = l->ncomps;
    if (chunk.n == 0 || parse_comps(chunk, l, first))
        return -1;
    for (int i = first; i < l->ncomps; i++) {
        l->comps[i].mirror = (unsigned char)id;
        l->comps[i].mirror_flags = (unsigned char)flags;
    }
    return 0;
}

/* Version 3 (iez.layout.emulated._parse_v3): mirrors 1, 2, ... each with its version-2 fields. */
static int parse_v3(struct span rest, struct iez_layout *l)
{
    int id = 0, flags = 0, preferred = 0, stale = 0;
    struct span chunk = { rest.p, 0 };
    while (rest.n) {
        struct span field, key, value;
        int more;
        const char *at = rest.p;
        next_part(&rest, ' ', &field, &more);
        if (more && rest.n == 0)
            return -1; /* a trailing space */
        value = field;
        next_part(&value, '=', &key, &more);
        if (more && span_is(key, "mirror")) {
            if (id && (parse_mirror(chunk, l, id, flags) || at == chunk.p))
                return -1;
            if (id >= IEZ_MAX_MIRRORS || parse_mirror_field(value, id + 1, &flags, &preferred))
                return -1;
            id++;
            stale += !!(flags & IEZ_MIRROR_STALE);
            chunk = (struct span){ rest.p, 0 };
        } else if (!id) {
            return -1; /* a field before the first mirror */
        } else {
            chunk.n = (size_t)(field.p + field.n - chunk.p);
        }
    }
    if (!id || parse_mirror(chunk, l, id, flags) || id < 2 || stale == id)
        return -1;
    l->nmirrors = id;
    summarise(l);
    return 0;
}

static int parse_v1(struct span rest, struct iez_layout *l)
{
    static const char *const keys[] = { "version=", "stripe_size=", "stripe_count=", "osts=" };
    struct span v[4];
    for (int i = 0; i < 4; i++) {
        struct span field;
        int more;
        if (rest.n == 0 && i > 0)
            return -1;
        next_part(&rest, ' ', &field, &more);
        size_t k = strlen(keys[i]);
        if (field.n < k || memcmp(field.p, keys[i], k) || (i < 3 && !more) || (i == 3 && more))
            return -1;
        v[i] = (struct span){ field.p + k, field.n - k };
    }
    int64_t version, size, count;
    if (parse_int(v[0], &version) || parse_int(v[1], &size) || parse_int(v[2], &count))
        return -1;
    if (version != 1 || size <= 0 || count < 1 || count > IEZ_MAX_STRIPES)
        return -1;
    /* osts: -?[0-9]+ each, none negative ("-0" is 0 to Python) */
    int n = 0, more = 1;
    while (more) {
        struct span part;
        next_part(&v[3], ',', &part, &more);
        int64_t o;
        if (parse_int(part, &o) || o < 0 || o > 0xffffffffLL || n >= IEZ_MAX_STRIPES)
            return -1;
        l->osts[n++] = (uint32_t)o;
    }
    if (n != count)
        return -1;
    l->stripe_size = (uint64_t)size;
    l->stripe_count = n;
    return 0;
}

int iez_layout_parse(const char *text, size_t len, struct iez_layout *l)
{
    l->stripe_size = 0;
    l->stripe_count = 0;
    l->ncomps = 0;
    l->nosts = 0;
    l->nmirrors = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e)
            return -1; /* not ASCII text, or a byte no valid field holds */
    struct span all = { text, len }, first;
    int more;
    next_part(&all, ' ', &first, &more);
    if (span_is(first, "version=2"))
        return more && all.n ? parse_v2(all, l) : -1;
    if (span_is(first, "version=3")) {
        int rc = more && all.n ? parse_v3(all, l) : -1;
        if (rc)
            l->nmirrors = 0;
        return rc;
    }
    int rc = parse_v1((struct span){ text, len }, l);
    if (rc)
        l->ncomps = 0;
    return rc;
}

int iez_layout_parse_osts(const char *text, struct iez_layout *l)
{
    int count = 0;
    const char *p = text;
    l->ncomps = 0;
    l->nosts = 0;
    l->nmirrors = 0;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        if (*p < '0' || *p > '9' || count >= IEZ_MAX_STRIPES)
            return -1;
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (errno || v > 0xffffffffUL || (*end && *end != ' ' && *end != ','))
            return -1;
        l->osts[count++] = (uint32_t)v;
        p = end;
    }
    if (count == 0)
        return -1;
    if (l->stripe_count != count)
        return -1; /* the row contradicts itself: do not guess which part is right */
    return 0;
}

/* ---- directories ------------------------------------------------------ */

int iez_parent_dir(const char *abspath, char *out, size_t outlen)
{
    const char *slash = strrchr(abspath, '/');
    if (!slash)
        return -1;
    size_t n = slash == abspath ? 1 : (size_t)(slash - abspath);
    if (n >= outlen)
        return -1;
    memcpy(out, abspath, n);
    out[n] = '\0';
    return 0;
}

static int emulated_default(const char *dir, struct iez_layout *l)
{
    const char *name = iez_cfg()->xattr_name;
    ssize_t size = getxattr(dir, name, NULL, 0);
    if (size < 0)
        return errno == ENODATA || errno == ENOTSUP ? 1 : -1;
    if (size > (1 << 20))
        return -2;
    char *text = iez_tmp_alloc((size_t)size + 1);
    if (!text)
        return -1;
    ssize_t got = getxattr(dir, name, text, (size_t)size);
    int rc;
    if (got < 0)
        rc = errno == ENODATA ? 1 : -1; /* removed meanwhile; ERANGE: grown meanwhile, cannot tell */
    else
        rc = iez_layout_parse(text, (size_t)got, l) == 0 ? 0 : -2;
    iez_tmp_free(text);
    return rc;
}

int iez_dir_default_template(const char *abspath, int lustre, char *out, size_t outlen)
{
    char dir[IEZ_PATH_MAX];
    if (outlen == 0 || iez_parent_dir(abspath, dir, sizeof dir)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    struct iez_layout *l = iez_tmp_alloc(sizeof *l);
    if (!l) {
        errno = ENOMEM;
        return -1;
    }
    int rc;
    if (lustre) {
        int fd = iez_sys_open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC, 0);
        if (fd < 0) {
            rc = -1;
        } else {
            rc = iez_lustre_getlayout(fd, l, 0);
            int err = errno;
            iez_sys_close(fd);
            errno = err;
            if (rc == -1 && err == ENODATA)
                rc = 1;
        }
    } else {
        rc = emulated_default(dir, l);
    }
    if (rc == 1) {
        out[0] = '\0'; /* no default */
        rc = 0;
    } else if (rc == 0 && iez_layout_template(l, out, outlen) < 0) {
        rc = -2;
    }
    iez_tmp_free(l);
    return rc;
}

size_t iez_escape_path(const char *path, char *out, size_t outlen)
{
    size_t n = 0;
    for (const char *p = path; *p; p++) {
        const char *rep = NULL;
        char one[2] = { *p, 0 };
        if (*p == '\\') rep = "\\\\";
        else if (*p == '\t') rep = "\\t";
        else if (*p == '\n') rep = "\\n";
        else rep = one;
        size_t k = strlen(rep);
        if (n + k + 1 > outlen)
            return (size_t)-1;
        memcpy(out + n, rep, k);
        n += k;
    }
    out[n] = '\0';
    return n;
}

/* mkdir -p: 0 when the directory exists afterwards. */
int iez_make_dirs(const char *dir)
{
    char buf[IEZ_PATH_MAX];
    size_t n = strlen(dir);
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, dir, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int iez_sidecar_append(const char *attr_text, const char *abspath)
{
    const struct iez_config *c = iez_cfg();
    char file[IEZ_PATH_MAX + 32];
    if (iez_make_dirs(c->state_dir) != 0)
        return -1;
    snprintf(file, sizeof file, "%s/layouts.log", c->state_dir);
    size_t cap = strlen(attr_text) + 2 * strlen(abspath) + 3; /* heap: threads may have small stacks */
    char *line = iez_tmp_alloc(cap);
    if (!line)
        return -1;
    size_t n = strlen(attr_text);
    memcpy(line, attr_text, n);
    line[n++] = '\t';
    size_t e = iez_escape_path(abspath, line + n, cap - n - 1);
    int rc = -1;
    if (e != (size_t)-1) {
        n += e;
        line[n++] = '\n';
        int fd = iez_sys_open(file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            ssize_t w = iez_sys_write(fd, line, n); /* one write: concurrent appends do not interleave */
            iez_sys_close(fd);
            rc = w == (ssize_t)n ? 0 : -1;
        }
    }
    iez_tmp_free(line);
    return rc;
}
