// The Communicator interface: a group of processes (ranks) and the collectives training
// needs, on Tensors. Implementations: single process (src/comm/single.cpp), MPI for CPU
// tensors (src/comm/mpi/), later NCCL/RCCL/HCCL for device tensors. Model code never calls
// these; the parallel layer does. Every rank of a communicator must call the same collectives
// in the same order (async ones included) with matching dtypes and sizes. Any thread may call,
// one at a time on one communicator; different communicators may be used by different threads
// at once (MPI is started at MPI_THREAD_MULTIPLE where the library has it).
//
// Determinism: all_gather, broadcast and send/recv move bytes. ReduceOp::ordered_sum and
// ReduceOp::max give bitwise identical results on every rank, independent of the library's
// algorithm, message size and world size (ordered_sum equals the serial sum
// x0 + x1 + ... + x(p-1) in rank order, a NaN sum being the canonical quiet NaN: which NaN an
// add returns differs between CPUs and devices). ReduceOp::sum uses the library's own algorithm:
// identical on every rank in practice, repeatable for a fixed world size and message size,
// but its summation order (so its rounding) may differ from the serial sum, between message
// sizes and between the blocking and async variants (Open MPI 4.1, 4 ranks: a quarter of f32
// sums differ from the serial sum in the last bits; 3 ranks: MPI_Allreduce and
// MPI_Iallreduce disagree at some sizes).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"

namespace anvil {

class Allocator;

enum class ReduceOp {
  sum,          // the library's fastest sum; bf16/f16 sums always run as ordered_sum
  max,          // exact; NaN wins (as a canonical quiet NaN), +0 beats -0
  ordered_sum,  // deterministic: rank-order sum, bf16/f16 accumulated in f32, rounded once;
                // a NaN result is the canonical quiet NaN
};

// Returns "sum", "max" or "ordered_sum".
const char* reduce_op_name(ReduceOp op);

// A pending asynchronous collective. Its tensors must stay alive and untouched until wait()
// returns; destroying an unfinished handle waits for it.
class CommHandle {
 public:
  virtual ~CommHandle() = default;
  // Blocks until the collective is complete and its buffers may be reused.
  virtual void wait() = 0;
  // Advances the collective without blocking; returns whether it is complete. Libraries
  // without a progress thread (Open MPI's default) move data only inside such calls.
  virtual bool test() {
    wait();
    return true;
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Returns the sub-group of ranks that passed the same color (>= 0), ordered by key, then by
  // rank in this communicator. Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // In place: every rank ends with the reduction of all ranks' `t`.
  virtual void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // out (n) = reduction of rank r's slice [r*n, (r+1)*n) of in (n * size); in and out must not
  // overlap.
  virtual void reduce_scatter(const Tensor& in, const Tensor& out,
                              ReduceOp op = ReduceOp::sum) = 0;
  // out (n * size) = concatenation of every rank's in (n), in rank order. `in` may be this
  // rank's own slice of `out` (in place); any other overlap is an error.
  virtual void all_gather(const Tensor& in, const Tensor& out) = 0;
  // Copies root's `t` into every rank's `t`.
  virtual void broadcast(const Tensor& t, int root) = 0;
  virtual void barrier() = 0;
  // Point to point; messages between two ranks arrive in send order and the receiver's tensor
  // must have the sender's dtype and element count. A send may block until the matching recv
  // starts, so pair them (e.g. even ranks send first, odd ranks receive first).
  virtual void send(const Tensor& t, int peer) = 0;
  virtual void recv(const Tensor& t, int peer) = 0;

  // Asynchronous variants: start the collective and return at once. Results equal the blocking
  // variant's for max and ordered_sum; for sum they may differ in the last bits.
  virtual std::unique_ptr<CommHandle> all_reduce_async(const Tensor& t,
                                                       ReduceOp op = ReduceOp::sum) = 0;
  virtual std::unique_ptr<CommHandle> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                                           ReduceOp op = ReduceOp::sum) = 0;
  virtual std::unique_ptr<CommHandle> all_gather_async(const Tensor& in, const Tensor& out) = 0;
  // Non-blocking point to point (MPI_Isend / MPI_Irecv): start the transfer and return at once;
  // `t` must stay alive and untouched until the handle's wait() returns. Messages between two
  // ranks match in start order, blocking and async alike, so a ring where every rank starts
  // its send to the next rank and its recv from the previous one cannot deadlock.
  virtual std::unique_ptr<CommHandle> send_async(const Tensor& t, int peer) = 0;
  virtual std::unique_ptr<CommHandle> recv_async(const Tensor& t, int peer) = 0;

  // Sets where the communicator's own staging buffers come from (the copies an ordered sum
  // receives before adding them up), counted there as MemoryCategory::communication; nullptr,
  // the default, takes them from HostAllocator::instance(). A CPU backend lends itself, since
  // its device memory is host memory. The allocator must outlive every collective started
  // while it is set. Communicators without staging of their own ignore it.
  virtual void set_staging_allocator(Allocator* allocator) { (void)allocator; }
};

// Returns the world communicator: MPI when built with MPI and launched by a process manager
// (mpirun, srun), else the single-process one. MPI is initialised on the first call only,
// so commands that never ask for the world never start MPI.
Communicator& world();
// Returns a single-process communicator (rank 0 of 1).
std::unique_ptr<Communicator> make_single_process_communicator();
// Ends the whole job after a fatal error: MPI_Abort when several MPI ranks run (so no rank
// hangs in a collective or in MPI_Finalize waiting for this one), else std::exit(code).
[[noreturn]] void abort_world(int code);
// Returns a one-line description of MPI support for `anvil info`.
std::string mpi_description();

}  // namespace anvil
