/* MPI_File_open with access modes whose outcomes are known, for comparing runs
 * with and without libiez.
 *
 *   mpi_open_modes DIR
 *
 * Rank 0 of the job (run it with one or more ranks; only rank 0 probes, on
 * MPI_COMM_SELF) tries each case below on a file that does not exist unless
 * stated, prints "<label> ok" or "<label> error <class>" where class is the
 * MPI error class number, and closes what opened. DIR/exists must exist.
 */
#include <mpi.h>
#include <stdio.h>

static const char *dir;

static void probe(const char *label, const char *name, int amode)
{
    char path[4096];
    MPI_File fh;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = MPI_File_open(MPI_COMM_SELF, path, amode, MPI_INFO_NULL, &fh);
    if (rc == MPI_SUCCESS) {
        printf("%s ok\n", label);
        MPI_File_close(&fh);
    } else {
        int cls = -1;
        MPI_Error_class(rc, &cls);
        printf("%s error %d\n", label, cls);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN);
    if (argc < 2) {
        MPI_Finalize();
        return 2;
    }
    dir = argv[1];
    if (rank == 0) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        probe("create_rdonly", "create_rdonly", MPI_MODE_CREATE | MPI_MODE_RDONLY);
        probe("create_rdwr_wronly", "create_rdwr_wronly", MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_WRONLY);
        probe("create_missing_dir", "missing/f", MPI_MODE_CREATE | MPI_MODE_WRONLY);
        probe("create_excl_existing", "exists", MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY);
        probe("create_excl_new", "excl_new", MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY);
        probe("create_wronly", "wronly_new", MPI_MODE_CREATE | MPI_MODE_WRONLY);
        probe("create_rdwr", "rdwr_new", MPI_MODE_CREATE | MPI_MODE_RDWR);
    }
    MPI_Finalize();
    return 0;
}
