/* Descriptor numbers as a program sees them (issue 14, reproduction 4).
 *
 *   fd_games first DIR      creates DIR/placed, then DIR/a, DIR/b, DIR/c;
 *                           prints the four descriptor numbers
 *   fd_games emfile DIR     creates DIR/placed, then opens /dev/null until it
 *                           fails; prints how many opened and the errno
 *   fd_games closed012 DIR  closes 0, 1 and 2, creates DIR/placed, then
 *                           opens DIR/in, DIR/out, DIR/err (they become 0, 1,
 *                           2) and writes to stdout and stderr, which must land
 *                           in DIR/out and DIR/err
 *   fd_games closerange DIR creates DIR/p1 and DIR/lockme, closes every
 *                           descriptor from 3 up (close_range), opens
 *                           DIR/lockme again (3) and locks it
 *                           whole (F_SETLK), puts it on every number from 4 to
 *                           the soft RLIMIT_NOFILE but 7, 8, 9 (dup2), creates
 *                           DIR/p2; a child then asks F_GETLK whether the lock
 *                           still covers the whole file, SQLite's lock bytes
 *                           and those of its WAL index
 *
 * DIR/placed, p1 and p2 are the files a test pins a layout for: their creates
 * make libiez look up, and so open its DB connection. The output depends only
 * on what the program's own calls did. Exit status 0 unless a call that must
 * succeed failed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *dir;

static int create(const char *name, int flags)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return open(path, flags | O_CREAT, 0644);
}

static int first(void)
{
    int placed = create("placed", O_WRONLY | O_TRUNC);
    if (placed < 0)
        return 1;
    close(placed);
    int a = create("a", O_WRONLY), b = create("b", O_WRONLY), c = create("c", O_WRONLY);
    printf("placed %d a %d b %d c %d\n", placed, a, b, c);
    return a < 0 || b < 0 || c < 0;
}

static int emfile(void)
{
    int placed = create("placed", O_WRONLY | O_TRUNC);
    if (placed < 0)
        return 1;
    close(placed);
    int n = 0;
    while (open("/dev/null", O_RDONLY) >= 0)
        n++;
    printf("opened %d then %s\n", n, strerror(errno));
    return 0;
}

static int closed012(void)
{
    close(0);
    close(1);
    close(2);
    int placed = create("placed", O_WRONLY | O_TRUNC);
    if (placed < 0)
        return 1;
    close(placed);
    int in = create("in", O_RDWR), out = create("out", O_WRONLY), err = create("err", O_WRONLY);
    dprintf(out, "in %d out %d err %d\n", in, out, err);
    printf("to stdout\n");
    fflush(stdout);
    fprintf(stderr, "to stderr\n");
    return in != 0 || out != 1 || err != 2;
}

/* Whether another process sees one write lock over all of [start, start + len) of path (len 0: to
 * the end): "held", "partly released" (the lock found leaves a part of it free), or "released". */
static const char *held(const char *path, off_t start, off_t len)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return "cannot-open";
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
    const char *r;
    if (fcntl(fd, F_GETLK, &fl) != 0)
        r = "error";
    else if (fl.l_type == F_UNLCK)
        r = "released";
    else if (fl.l_start <= start && (fl.l_len == 0 || (len != 0 && fl.l_start + fl.l_len >= start + len)))
        r = "held";
    else
        r = "partly released";
    close(fd);
    return r;
}

static int closerange(void)
{
    int p1 = create("p1", O_WRONLY), made = create("lockme", O_WRONLY);
    if (p1 < 0 || made < 0)
        return 1;
    close(p1);
    close(made);
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
        return 1;
    char lockme[4096];
    snprintf(lockme, sizeof lockme, "%s/lockme", dir);
    int fd = open(lockme, O_RDWR); /* no create: the next lookup is p2's, after the games */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    if (fd != 3 || fcntl(fd, F_SETLK, &fl) != 0)
        return 1;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    for (int k = 4; k < (int)rl.rlim_cur; k++)
        if (k < 7 || k > 9)
            dup2(fd, k); /* 7, 8 and 9 stay free for the create below */
    int p2 = create("p2", O_WRONLY);
    if (p2 < 0)
        return 1;
    close(p2);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        for (int k = 10; k < (int)rl.rlim_cur; k++)
            close(k); /* room for the child's own open; its closes do not touch the parent's lock */
        printf("whole file %s, SQLite's lock bytes %s, its WAL index's %s\n", held(lockme, 0, 0),
               held(lockme, 0x40000000, 512), held(lockme, 120, 16));
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fd_games first|emfile|closed012|closerange DIR\n");
        return 2;
    }
    dir = argv[2];
    if (!strcmp(argv[1], "first"))
        return first();
    if (!strcmp(argv[1], "emfile"))
        return emfile();
    if (!strcmp(argv[1], "closed012"))
        return closed012();
    if (!strcmp(argv[1], "closerange"))
        return closerange();
    fprintf(stderr, "fd_games: unknown game %s\n", argv[1]);
    return 2;
}
