/* Creates files relative to a directory descriptor, for the placement tests.
 *
 *   at_create [--opath] DIR NAME...
 *
 * Opens DIR (O_RDONLY|O_DIRECTORY, or O_PATH with --opath) and creates each
 * NAME with openat(dirfd, NAME, O_CREAT|O_WRONLY|O_TRUNC, 0644), writing NAME
 * and a newline into it. Prints "created NAME" per file; exit status 0 when
 * every create succeeded, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int i = 1, flags = O_RDONLY | O_DIRECTORY;
    if (i < argc && !strcmp(argv[i], "--opath")) {
        flags = O_PATH | O_DIRECTORY;
        i++;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: at_create [--opath] DIR NAME...\n");
        return 2;
    }
    int dfd = open(argv[i], flags);
    if (dfd < 0) {
        fprintf(stderr, "open %s: %s\n", argv[i], strerror(errno));
        return 1;
    }
    int failed = 0;
    for (i++; i < argc; i++) {
        int fd = openat(dfd, argv[i], O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0) {
            fprintf(stderr, "openat %s: %s\n", argv[i], strerror(errno));
            failed = 1;
            continue;
        }
        size_t n = strlen(argv[i]);
        if (write(fd, argv[i], n) != (ssize_t)n || write(fd, "\n", 1) != 1)
            failed = 1;
        close(fd);
        printf("created %s\n", argv[i]);
    }
    close(dfd);
    return failed;
}
