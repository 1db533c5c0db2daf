/* layout_tool: libiez's layout code driven from the command line, so the
 * pytest suite can hold it to the Python side (tests/placement_lib/test_layouts.py):
 *
 *   layout_tool text TEXT...       one line per TEXT: "ok<TAB>format<TAB>template<TAB>version 2",
 *                                  or "error" where the library refuses the text
 *   layout_tool lum TEXT           the bytes libiez hands LL_IOC_LOV_SETSTRIPE for TEXT, on stdout
 *   layout_tool getstripe FILE [dir]
 *                                  reads FILE as a buffer LL_IOC_LOV_GETSTRIPE filled (dir: a
 *                                  directory's default, no OST objects) and prints one line as `text`
 */
#include "iez.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void print_layout(const struct iez_layout *l)
{
    size_t cap = iez_layout_text_cap(l);
    char *a = malloc(cap), *b = malloc(cap), *c = malloc(cap);
    if (a && b && c && iez_layout_format(l, a, cap) >= 0 && iez_layout_template(l, b, cap) >= 0 &&
        iez_layout_format_v2(l, c, cap) >= 0)
        printf("ok\t%s\t%s\t%s\n", a, b, c);
    else
        printf("error\n");
    free(a);
    free(b);
    free(c);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: layout_tool text TEXT... | lum TEXT | getstripe FILE [dir]\n");
        return 2;
    }
    struct iez_layout *l = calloc(1, sizeof *l);
    if (!l)
        return 2;
    int rc = 0;
    if (!strcmp(argv[1], "text")) {
        for (int i = 2; i < argc; i++) {
            if (iez_layout_parse(argv[i], strlen(argv[i]), l) == 0)
                print_layout(l);
            else
                printf("error\n");
        }
    } else if (!strcmp(argv[1], "lum")) {
        long n = -1;
        void *buf = NULL;
        if (iez_layout_parse(argv[2], strlen(argv[2]), l) == 0 && (n = iez_lustre_lum_size(l)) > 0 &&
            (buf = malloc((size_t)n)) && iez_lustre_build_lum(l, buf, (size_t)n) == n) {
            rc = fwrite(buf, 1, (size_t)n, stdout) == (size_t)n ? 0 : 1;
        } else {
            fprintf(stderr, "layout_tool: no LL_IOC_LOV_SETSTRIPE buffer for '%s'\n", argv[2]);
            rc = 1;
        }
        free(buf);
    } else if (!strcmp(argv[1], "getstripe")) {
        FILE *f = fopen(argv[2], "rb");
        static unsigned char buf[1 << 17];
        size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        if (!f) {
            perror(argv[2]);
            rc = 2;
        } else if (iez_lustre_parse_lum(buf, n, l, !(argc > 3 && !strcmp(argv[3], "dir"))) == 0) {
            print_layout(l);
        } else {
            printf("error\n");
        }
    } else {
        fprintf(stderr, "layout_tool: unknown command %s\n", argv[1]);
        rc = 2;
    }
    free(l);
    return rc;
}
