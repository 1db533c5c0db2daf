/* Calls the kernel refuses, made as a careless program makes them (issue 14, reproductions 5 and 6).
 *
 *   bad_calls DIR
 *
 * Each line is "<label> <result> <errno name>" (result "ok" or "-1"/"NULL";
 * errno set to EDOM first):
 * - invalid path pointers: (char *)1, an unmapped page, and a name whose
 *   bytes run into an unreadable page, through open, open64, openat, creat and
 *   fopen with creating flags - the kernel answers EFAULT;
 * - O_PATH|O_CREAT on DIR/opath_missing (missing): O_PATH ignores O_CREAT,
 *   so ENOENT and no file; on DIR/opath_exists (made here first): a descriptor.
 * A test pins a layout for DIR/opath_missing and DIR/opath_exists. Exit status 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *name(int e)
{
    switch (e) {
    case 0: return "0";
    case EDOM: return "EDOM";
    case EFAULT: return "EFAULT";
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EINVAL: return "EINVAL";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    default: return strerror(e);
    }
}

static void report(const char *label, int fd)
{
    int e = errno;
    printf("%s %s %s\n", label, fd >= 0 ? "ok" : "-1", name(fd >= 0 ? 0 : e));
    if (fd >= 0)
        close(fd);
}

static void try_path(const char *label, const char *p)
{
    char l[128];
    snprintf(l, sizeof l, "%s open", label);
    errno = EDOM;
    report(l, open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644));
    snprintf(l, sizeof l, "%s open64", label);
    errno = EDOM;
    report(l, open64(p, O_CREAT | O_WRONLY | O_EXCL, 0644));
    snprintf(l, sizeof l, "%s openat", label);
    errno = EDOM;
    report(l, openat(AT_FDCWD, p, O_CREAT | O_RDWR, 0600));
    snprintf(l, sizeof l, "%s creat", label);
    errno = EDOM;
    report(l, creat(p, 0644));
    snprintf(l, sizeof l, "%s fopen", label);
    errno = EDOM;
    FILE *fp = fopen(p, "w");
    int e = errno;
    printf("%s %s %s\n", l, fp ? "ok" : "NULL", name(fp ? 0 : e));
    if (fp)
        fclose(fp);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bad_calls DIR\n");
        return 2;
    }
    long page = sysconf(_SC_PAGESIZE);
    char *two = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (two == MAP_FAILED)
        return 2;
    /* the first page ends in "/tmp/x" without a NUL; the second cannot be read */
    mprotect(two + page, (size_t)page, PROT_NONE);
    memcpy(two + page - 6, "/tmp/x", 6);
    char *gone = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(gone, (size_t)page);

    try_path("pointer_1", (const char *)1);
    try_path("unmapped", gone);
    try_path("runs_into_unreadable", two + page - 6);

    char missing[4096], exists[4096];
    snprintf(missing, sizeof missing, "%s/opath_missing", argv[1]);
    snprintf(exists, sizeof exists, "%s/opath_exists", argv[1]);
    close(open(exists, O_CREAT | O_WRONLY, 0644));
    errno = EDOM;
    report("opath_creat_missing", open(missing, O_PATH | O_CREAT, 0644));
    errno = EDOM;
    report("opath_creat_missing_at", openat(AT_FDCWD, missing, O_PATH | O_CREAT | O_EXCL, 0644));
    errno = EDOM;
    report("opath_creat_exists", open(exists, O_PATH | O_CREAT, 0644));
    printf("opath_missing %s\n", access(missing, F_OK) == 0 ? "exists" : "absent");
    return 0;
}
