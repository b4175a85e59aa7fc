// The distributed suite's main: MPI around Catch2. Every rank runs every test in the same order (the
// ring's collectives need it), so the tests use CHECK, never REQUIRE, around collective calls.
#define CATCH_CONFIG_RUNNER
#include "support/catch.hpp"
#include <mpi.h>

#include "support/suite_lifetime.hpp"

int main(int argc, char** argv) {
    int provided = MPI_THREAD_SINGLE;  // a thread drives each ring step's transfer
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    const int failed = Catch::Session().run(argc, argv);
    vkattn::test::end_suite_objects();  // the ring's Context ends before MPI and the layers' statics
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}
