/* Absolute paths for the lookup. The DB holds the paths the learning phase
 * saw, made absolute the same lexical way, so symbolic links are not resolved
 * (the file does not exist yet, and its directory may be a link the trace saw
 * under the same name). */
#include "iez.h"

#include <fcntl.h>
#include <string.h>
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

int iez_abspath(int dirfd, const char *path, char *out, size_t outlen)
{
    if (!path || !*path || outlen < 2)
        return -1;
    size_t plen = strlen(path);
    if (path[0] == '/') {
        if (plen >= outlen)
            return -1;
        memcpy(out, path, plen + 1);
    } else {
        char base[IEZ_PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base))
                return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n <= 0 || base[0] != '/')
                return -1;
            base[n] = '\0';
        }
        size_t blen = strlen(base);
        if (blen + 1 + plen >= outlen)
            return -1;
        memcpy(out, base, blen);
        out[blen] = '/';
        memcpy(out + blen + 1, path, plen + 1);
    }
    iez_normalise(out);
    return 0;
}
