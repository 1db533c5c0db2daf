/* An MPI-IO job for the tracing mode: every rank writes its own file with
 * MPI_File_write (1000 MPI_INTs) and a slice of one shared file with
 * MPI_File_write_at_all (2048 MPI_INTs at rank * 8192 bytes).
 *   mpirun -np N mpi_trace_writer DIR */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 2)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int *data = calloc(2048, sizeof *data);
    char path[4096];
    MPI_File fh;
    MPI_Status st;

    snprintf(path, sizeof path, "%s/fpp.%04d.dat", argv[1], rank);
    if (MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_write(fh, data, 1000, MPI_INT, &st);
    MPI_File_close(&fh);

    snprintf(path, sizeof path, "%s/shared.dat", argv[1]);
    if (MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh) != MPI_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_write_at_all(fh, (MPI_Offset)rank * 8192, data, 2048, MPI_INT, &st);
    MPI_File_close(&fh);
    free(data);
    MPI_Finalize();
    return 0;
}
