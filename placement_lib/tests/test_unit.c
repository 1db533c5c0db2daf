/* Unit tests of libiez's pure parts: path normalisation, the layout text, the
 * DB's OST text, MariaDB URLs, CSV quoting, the sidecar escape, and the
 * lov_user_md_v3 buffer handed to LL_IOC_LOV_SETSTRIPE. */
#include "iez.h"
#include "lustre.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static int failures, checks;
#define CHECK(cond)                                                          \
    do {                                                                     \
        checks++;                                                            \
        if (!(cond)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
            failures++;                                                      \
        }                                                                    \
    } while (0)
#define STREQ(a, b) CHECK(strcmp((a), (b)) == 0)

static void norm(const char *in, const char *want)
{
    char buf[IEZ_PATH_MAX];
    strcpy(buf, in);
    iez_normalise(buf);
    if (strcmp(buf, want) != 0)
        fprintf(stderr, "normalise(%s) = %s, want %s\n", in, buf, want);
    STREQ(buf, want);
}

static void test_paths(void)
{
    norm("/", "/");
    norm("//", "/");
    norm("/a/b/c", "/a/b/c");
    norm("/a//b///c/", "/a/b/c");
    norm("/a/./b/.", "/a/b");
    norm("/a/b/../c", "/a/c");
    norm("/a/b/../../..", "/");
    norm("/../x", "/x");
    norm("/a/..b/c..", "/a/..b/c..");
    norm("/a/.../b", "/a/.../b");
    CHECK(iez_has_prefix("/usr/lib/x", "/usr"));
    CHECK(iez_has_prefix("/usr", "/usr"));
    CHECK(!iez_has_prefix("/usrdata/x", "/usr"));
    CHECK(iez_has_prefix("/anything", "/"));

    char out[IEZ_PATH_MAX];
    CHECK(iez_abspath(AT_FDCWD, "/abs/./p", out, sizeof out) == 0);
    STREQ(out, "/abs/p");
    char cwd[IEZ_PATH_MAX], want[IEZ_PATH_MAX + 8];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(want, sizeof want, "%s/rel", strcmp(cwd, "/") ? cwd : "");
    CHECK(iez_abspath(AT_FDCWD, "./x/../rel", out, sizeof out) == 0);
    STREQ(out, want);
    int dfd = open("/tmp", O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0);
    CHECK(iez_abspath(dfd, "sub/../f.dat", out, sizeof out) == 0);
    STREQ(out, "/tmp/f.dat");
    close(dfd);
    CHECK(iez_abspath(AT_FDCWD, "", out, sizeof out) != 0);
    CHECK(iez_abspath(AT_FDCWD, "/abc", out, 3) != 0); /* does not fit */
}

static void test_layout_text(void)
{
    struct iez_layout *l = calloc(1, sizeof *l);
    l->stripe_size = 1048576;
    l->stripe_count = 3;
    l->osts[0] = 3, l->osts[1] = 7, l->osts[2] = 11;
    char text[256];
    int n = iez_layout_format(l, text, sizeof text);
    STREQ(text, "version=1 stripe_size=1048576 stripe_count=3 osts=3,7,11");
    CHECK(n == (int)strlen(text));
    CHECK(iez_layout_format(l, text, 20) == -1); /* too small: refused, not truncated */

    memset(l, 0, sizeof *l);
    l->stripe_count = 3;
    CHECK(iez_layout_parse_osts("3 7 11", l) == 0);
    CHECK(l->osts[0] == 3 && l->osts[1] == 7 && l->osts[2] == 11);
    l->stripe_count = 2;
    CHECK(iez_layout_parse_osts("3 7 11", l) == -1); /* count contradicts the list */
    l->stripe_count = 1;
    CHECK(iez_layout_parse_osts("", l) == -1);
    CHECK(iez_layout_parse_osts("x", l) == -1);
    CHECK(iez_layout_parse_osts("-1", l) == -1);
    CHECK(iez_layout_parse_osts("4294967296", l) == -1);
    CHECK(iez_layout_parse_osts("12abc", l) == -1);
    free(l);
}

static void test_lum(void)
{
    struct iez_layout *l = calloc(1, sizeof *l);
    l->stripe_size = 4 << 20;
    l->stripe_count = 3;
    l->osts[0] = 5, l->osts[1] = 0, l->osts[2] = 12;
    unsigned char buf[48 + 3 * 24];
    long n = iez_lustre_build_lum(l, buf, sizeof buf);
    CHECK(n == 48 + 3 * 24);
    struct iez_lov_user_md_v3 *lum = (void *)buf;
    CHECK(lum->lmm_magic == IEZ_LOV_USER_MAGIC_SPECIFIC);
    CHECK(lum->lmm_pattern == IEZ_LOV_PATTERN_RAID0);
    CHECK(lum->lmm_stripe_size == 4u << 20);
    CHECK(lum->lmm_stripe_count == 3);
    CHECK(lum->lmm_stripe_offset == 5);
    CHECK(lum->lmm_pool_name[0] == 0);
    CHECK(lum->lmm_objects[0].l_ost_idx == 5 && lum->lmm_objects[1].l_ost_idx == 0 &&
          lum->lmm_objects[2].l_ost_idx == 12);
    /* little-endian bytes at the documented offsets */
    CHECK(buf[0] == 0xD0 && buf[1] == 0x0B && buf[2] == 0xD5 && buf[3] == 0x0B);
    CHECK(buf[48 + 24 + 20] == 0 && buf[48 + 2 * 24 + 20] == 12);
    CHECK(iez_lustre_build_lum(l, buf, 100) == -1); /* buffer too small */
    l->stripe_size = 1000;                          /* not a multiple of 64 KiB */
    CHECK(iez_lustre_build_lum(l, buf, sizeof buf) == -1);
    l->stripe_size = 1ULL << 32; /* does not fit lmm_stripe_size */
    CHECK(iez_lustre_build_lum(l, buf, sizeof buf) == -1);
    free(l);
}

/* Text read back after formatting is the same layout; malformed text is refused, never read past. */
static void test_layout_text_robustness(void)
{
    static const char base[] = "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:1,2,5,6:"
                               "pool=flash comp=67108864:eof:-:-1:-:overstripe";
    struct iez_layout *l = calloc(1, sizeof *l), *again = calloc(1, sizeof *again);
    char out[1024], out2[1024];
    CHECK(iez_layout_parse(base, strlen(base), l) == 0);
    CHECK(l->ncomps == 3 && l->nosts == 4 && l->comps[0].dom && l->comps[2].stripe_count == -1);
    CHECK(iez_layout_format(l, out, sizeof out) == (int)strlen(base));
    STREQ(out, base);
    CHECK(iez_layout_format(l, out, 40) == -1); /* too small: refused, not truncated */
    CHECK(iez_layout_template(l, out, sizeof out) > 0);
    STREQ(out, "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:67108864:1048576:4:-:pool=flash "
               "comp=67108864:eof:-:-1:-:overstripe");
    /* every prefix and every one-byte change: parsed or refused, and what parses formats and reads back */
    char *copy = malloc(sizeof base); /* heap, exactly the text: ASan sees any read past it */
    int parsed = 0;
    for (size_t n = 0; n < sizeof base - 1; n++) {
        for (int change = 0; change < 4; change++) {
            memcpy(copy, base, sizeof base - 1);
            static const char repl[] = { 0, ' ', ':', '9' };
            if (change)
                copy[n] = repl[change];
            size_t len = change ? sizeof base - 1 : n;
            if (iez_layout_parse(copy, len, l) != 0)
                continue;
            parsed++;
            int m = iez_layout_format(l, out, sizeof out);
            CHECK(m > 0 && iez_layout_parse(out, (size_t)m, again) == 0);
            CHECK(iez_layout_format(again, out2, sizeof out2) == m && !strcmp(out, out2));
        }
    }
    CHECK(parsed > 0);
    free(copy);
    free(l);
    free(again);
}

/* A composite layout's LL_IOC_LOV_SETSTRIPE buffer read back as Lustre would return it;
 * truncated and corrupted buffers are refused without reading past them. */
static void test_comp_lum(void)
{
    static const char text[] = "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:2097152:3:4,0,9:pool=ssd";
    struct iez_layout *l = calloc(1, sizeof *l), *back = calloc(1, sizeof *back);
    CHECK(iez_layout_parse(text, strlen(text), l) == 0);
    long n = iez_lustre_lum_size(l);
    CHECK(n == 32 + 2 * 48 + 48 + 48 + 3 * 24);
    unsigned char *buf = malloc((size_t)n);
    CHECK(iez_lustre_build_lum(l, buf, (size_t)n) == n);
    CHECK(iez_lustre_build_lum(l, buf, (size_t)n - 1) == -1);
    /* as read back: the components are instantiated */
    struct iez_lov_comp_md_entry_v1 e;
    for (int i = 0; i < 2; i++) {
        memcpy(&e, buf + 32 + i * sizeof e, sizeof e);
        e.lcme_flags = IEZ_LCME_FL_INIT;
        memcpy(buf + 32 + i * sizeof e, &e, sizeof e);
    }
    char out[512];
    CHECK(iez_lustre_parse_lum(buf, (size_t)n, back, 1) == 0);
    CHECK(iez_layout_format(back, out, sizeof out) > 0);
    STREQ(out, text);
    CHECK(back->stripe_count == 3 && back->stripe_size == 2097152);
    CHECK(iez_lustre_parse_lum(buf, (size_t)n, back, 0) == 0); /* a directory's default: no objects */
    CHECK(iez_layout_format(back, out, sizeof out) > 0);
    STREQ(out, "version=2 comp=0:1048576:1048576:0:mdt comp=1048576:eof:2097152:3:-:pool=ssd");
    for (long len = 0; len < n; len++) {
        unsigned char *cut = malloc((size_t)len + 1); /* exactly len bytes in use: ASan catches a read past */
        memcpy(cut, buf, (size_t)len);
        CHECK(iez_lustre_parse_lum(cut, (size_t)len, back, 1) == -1);
        free(cut);
    }
    for (long at = 0; at < n; at++) {
        unsigned char saved = buf[at];
        buf[at] ^= 0xA5;
        if (iez_lustre_parse_lum(buf, (size_t)n, back, 1) == 0)
            CHECK(back->ncomps >= 0 && back->ncomps <= IEZ_MAX_COMPS && back->nosts <= IEZ_MAX_STRIPES);
        buf[at] = saved;
    }
    free(buf);
    free(l);
    free(back);
}

/* The emulated directory default as the canonical template: none, set, malformed. */
static void test_dir_default(void)
{
    char dir[] = "/tmp/iez-unit-XXXXXX", file[64], out[IEZ_TEMPLATE_MAX];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(file, sizeof file, "%s/f.dat", dir);
    CHECK(iez_dir_default_template(file, 0, out, sizeof out) == 0);
    STREQ(out, "");
    static const char v1[] = "version=1 stripe_size=1048576 stripe_count=2 osts=3,4";
    if (setxattr(dir, "user.iez.layout", v1, strlen(v1), 0) == 0) {
        CHECK(iez_dir_default_template(file, 0, out, sizeof out) == 0);
        STREQ(out, "version=2 comp=0:eof:1048576:2:-");
        CHECK(setxattr(dir, "user.iez.layout", "version=2 comp=", 15, 0) == 0);
        CHECK(iez_dir_default_template(file, 0, out, sizeof out) == -2);
    } else {
        CHECK(errno == ENOTSUP); /* no user attributes here: no default can be set either */
    }
    CHECK(iez_dir_default_template("/nonexistent-iez-dir/f", 0, out, sizeof out) == -1);
    rmdir(dir);
}

static void test_urls(void)
{
    struct iez_mysql_url u;
    CHECK(iez_parse_mysql_url("mysql://root@127.0.0.1:3306/iez", &u) == 0);
    STREQ(u.user, "root");
    STREQ(u.password, "");
    STREQ(u.host, "127.0.0.1");
    CHECK(u.port == 3306);
    STREQ(u.db, "iez");
    CHECK(iez_parse_mysql_url("mysql://u:p%40ss@db.example:1/x?charset=utf8mb4", &u) == 0);
    STREQ(u.user, "u");
    STREQ(u.password, "p@ss");
    STREQ(u.host, "db.example");
    CHECK(u.port == 1);
    STREQ(u.db, "x");
    CHECK(iez_parse_mysql_url("mariadb://h/db", &u) == 0);
    STREQ(u.host, "h");
    CHECK(u.port == 0);
    CHECK(iez_parse_mysql_url("mysql://h", &u) == -1);         /* no database */
    CHECK(iez_parse_mysql_url("mysql://h/", &u) == -1);
    CHECK(iez_parse_mysql_url("mysql://h:99999/db", &u) == -1);
    CHECK(iez_parse_mysql_url("mysql://h:x/db", &u) == -1);
    CHECK(iez_parse_mysql_url("postgres://h/db", &u) == -1);
}

static void test_csv_and_escape(void)
{
    char out[128];
    CHECK(iez_csv_field(out, sizeof out, "/plain/path") == 0);
    STREQ(out, "/plain/path");
    CHECK(iez_csv_field(out, sizeof out, "/a,b") == 0);
    STREQ(out, "\"/a,b\"");
    CHECK(iez_csv_field(out, sizeof out, "say \"hi\"") == 0);
    STREQ(out, "\"say \"\"hi\"\"\"");
    CHECK(iez_csv_field(out, sizeof out, "two\nlines") == 0);
    STREQ(out, "\"two\nlines\"");
    CHECK(iez_csv_field(out, 4, "toolong") == -1);
    CHECK(iez_escape_path("/a\\b\tc\nd", out, sizeof out) == strlen("/a\\\\b\\tc\\nd"));
    STREQ(out, "/a\\\\b\\tc\\nd");
    CHECK(iez_escape_path("/abcdef", out, 4) == (size_t)-1);
}

int main(void)
{
    test_paths();
    test_layout_text();
    test_lum();
    test_layout_text_robustness();
    test_comp_lum();
    test_dir_default();
    test_urls();
    test_csv_and_escape();
    if (failures) {
        fprintf(stderr, "test_unit: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_unit: %d checks passed\n", checks);
    return 0;
}
