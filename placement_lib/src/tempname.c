/* Files written under a temporary name and renamed (README "Temporary names"): rsync writes
 * ".NAME.XXXXXX" beside NAME and renames it, editors and scripts "NAME.tmp", "NAME~", ".#NAME", mkstemp
 * callers "NAME.XXXXXX". On Lustre a layout belongs to the inode, so the temporary file must be created
 * with the final name's layout: when a create misses, iez_temp_final gives the final names such a
 * temporary name stands for (same directory), which place.c looks up in turn.
 *
 * Tracing: rename, renameat and renameat2 (intercept.c) move a traced file's record to its new name
 * (iez_trace_renamed), so that the trace, and the map learnt from it, holds the final name with the
 * bytes written under the temporary one. */
#include "iez.h"

#include <string.h>

#define SUFFIX_LEN 6 /* the random part of mktemp, mkstemp and rsync's temporary names */

static int is_random_suffix(const char *s, size_t n)
{
    if (n != SUFFIX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')))
            return 0;
    }
    return 1;
}

/* Final name number k (0 .. IEZ_TEMP_PATTERNS - 1) of the temporary abspath into out: 1 when that pattern
 * matches (the result differs from abspath, has a non-empty name that is not "." or ".."), else 0. */
int iez_temp_final(const char *abspath, int k, char *out, size_t cap)
{
    const char *slash = strrchr(abspath, '/');
    if (!slash)
        return 0;
    const char *base = slash + 1;
    size_t dirlen = (size_t)(base - abspath), len = strlen(base);
    size_t from = 0, to = len; /* the final name is base[from, to) */
    const char *dot = strrchr(base, '.');
    switch (k) {
    case 0: /* rsync: ".NAME.XXXXXX" */
        if (len < 9 || base[0] != '.' || !dot || dot == base || !is_random_suffix(dot + 1, len - (size_t)(dot + 1 - base)))
            return 0;
        from = 1;
        to = (size_t)(dot - base);
        break;
    case 1: /* NAME.tmp */
        if (len < 5 || strcmp(base + len - 4, ".tmp") != 0)
            return 0;
        to = len - 4;
        break;
    case 2: /* NAME~ */
        if (len < 2 || base[len - 1] != '~')
            return 0;
        to = len - 1;
        break;
    case 3: /* .#NAME */
        if (len < 3 || base[0] != '.' || base[1] != '#')
            return 0;
        from = 2;
        break;
    case 4: /* NAME.XXXXXX (mkstemp, mktemp) */
        if (!dot || dot == base || !is_random_suffix(dot + 1, len - (size_t)(dot + 1 - base)))
            return 0;
        to = (size_t)(dot - base);
        break;
    default:
        return 0;
    }
    size_t n = to - from;
    if (to <= from || (n == 1 && base[from] == '.') || (n == 2 && base[from] == '.' && base[from + 1] == '.') ||
        dirlen + n + 1 > cap)
        return 0;
    memcpy(out, abspath, dirlen);
    memcpy(out + dirlen, base + from, n);
    out[dirlen + n] = '\0';
    return 1;
}
