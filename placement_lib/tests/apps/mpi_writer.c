/* MPI-IO writer for the placement tests.
 *
 *   mpi_writer DIR BYTES
 *
 * Every rank creates its own file DIR/fpp.<rank> (opened on MPI_COMM_SELF with
 * MPI_MODE_CREATE|MPI_MODE_WRONLY) and writes BYTES bytes of the letter
 * 'A' + rank with MPI_File_write_at. All ranks then open DIR/shared.dat
 * collectively on MPI_COMM_WORLD and each writes BYTES bytes of 'a' + rank at
 * offset rank * BYTES with MPI_File_write_at_all. Prints "rank R of N ok" and
 * exits 0, or names the failing call on stderr and aborts.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int rc, const char *what, int rank)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_writer DIR BYTES\n");
        MPI_Finalize();
        return 2;
    }
    const char *dir = argv[1];
    int bytes = atoi(argv[2]);
    char *buf = malloc((size_t)bytes);
    char path[4096];
    MPI_File fh;
    MPI_Status st;
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);

    snprintf(path, sizeof path, "%s/fpp.%d", dir, rank);
    memset(buf, 'A' + rank, (size_t)bytes);
    check(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh),
          "MPI_File_open(fpp)", rank);
    check(MPI_File_write_at(fh, 0, buf, bytes, MPI_BYTE, &st), "MPI_File_write_at", rank);
    check(MPI_File_close(&fh), "MPI_File_close(fpp)", rank);

    snprintf(path, sizeof path, "%s/shared.dat", dir);
    memset(buf, 'a' + rank, (size_t)bytes);
    check(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh),
          "MPI_File_open(shared)", rank);
    check(MPI_File_write_at_all(fh, (MPI_Offset)rank * bytes, buf, bytes, MPI_BYTE, &st),
          "MPI_File_write_at_all", rank);
    check(MPI_File_close(&fh), "MPI_File_close(shared)", rank);

    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d ok\n", rank, size);
    MPI_Finalize();
    return 0;
}
