/* The layout text (placement_lib/README.md "Formats"): what the emulation
 * stores in the user.iez.layout attribute, and the sidecar log where user
 * attributes are refused. */
#include "iez.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int iez_layout_format(const struct iez_layout *l, char *out, size_t outlen)
{
    int n = snprintf(out, outlen, "version=1 stripe_size=%llu stripe_count=%d osts=",
                     (unsigned long long)l->stripe_size, l->stripe_count);
    if (n < 0 || (size_t)n >= outlen)
        return -1;
    for (int i = 0; i < l->stripe_count; i++) {
        int m = snprintf(out + n, outlen - (size_t)n, i ? ",%u" : "%u", l->osts[i]);
        if (m < 0 || (size_t)(n + m) >= outlen)
            return -1;
        n += m;
    }
    return n;
}

int iez_layout_parse_osts(const char *text, struct iez_layout *l)
{
    int count = 0;
    const char *p = text;
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
    char *line = malloc(cap);
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
    free(line);
    return rc;
}
