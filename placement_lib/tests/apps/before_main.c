/* Creates a file from the program's own constructor, before main runs:
 * placement must work there too.
 *   before_main  (path from BEFORE_MAIN_PATH) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int early_fd = -2;

__attribute__((constructor(101))) static void early(void)
{
    const char *path = getenv("BEFORE_MAIN_PATH");
    if (path)
        early_fd = open(path, O_CREAT | O_WRONLY, 0644);
}

int main(void)
{
    if (early_fd < 0) {
        perror("open before main");
        return 1;
    }
    if (write(early_fd, "early\n", 6) != 6)
        return 1;
    close(early_fd);
    puts("ok");
    return 0;
}
