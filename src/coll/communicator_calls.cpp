// SPDX-License-Identifier: MIT
// The public Communicator's operations: each describes itself as one Call
// (operation, buffers, counts, type, reduction, root) and submits it,
// blocking or not; the implementation (communicator.cpp) checks and runs it.
#include <span>

#include "coll/communicator_internal.hpp"
#include "rdmx/comm.hpp"

namespace rdmx {

using coll::Call;

namespace {
Call make_alltoallv(const void* send, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* recv,
                    std::span<const std::size_t> rc, std::span<const std::size_t> rd, DataType type) {
  Call c = Call::of(CollOp::AllToAllv, send, recv, 0, type);
  c.send_counts.assign(sc.begin(), sc.end());
  c.send_displs.assign(sd.begin(), sd.end());
  c.recv_counts.assign(rc.begin(), rc.end());
  c.recv_displs.assign(rd.begin(), rd.end());
  return c;
}
Call make_sendrecv(const void* sb, std::size_t sc, int dest, void* rb, std::size_t rc, int source, DataType type) {
  Call c = Call::of(CollOp::SendRecv, sb, rb, sc, type, ReduceOp::Sum, dest);
  c.recv_count = rc;
  c.source = source;
  return c;
}
}  // namespace

void Communicator::all_reduce(const void* s, void* r, std::size_t n, DataType t, ReduceOp op) {
  coll::submit(*this, Call::of(CollOp::AllReduce, s, r, n, t, op), false);
}
void Communicator::all_gather(const void* s, void* r, std::size_t n, DataType t) {
  coll::submit(*this, Call::of(CollOp::AllGather, s, r, n, t), false);
}
void Communicator::reduce_scatter(const void* s, void* r, std::size_t n, DataType t, ReduceOp op) {
  coll::submit(*this, Call::of(CollOp::ReduceScatter, s, r, n, t, op), false);
}
void Communicator::broadcast(void* b, std::size_t n, DataType t, int root) {
  coll::submit(*this, Call::of(CollOp::Broadcast, b, b, n, t, ReduceOp::Sum, root), false);
}
void Communicator::reduce(const void* s, void* r, std::size_t n, DataType t, ReduceOp op, int root) {
  coll::submit(*this, Call::of(CollOp::Reduce, s, r, n, t, op, root), false);
}
void Communicator::all_to_all(const void* s, void* r, std::size_t n, DataType t) {
  coll::submit(*this, Call::of(CollOp::AllToAll, s, r, n, t), false);
}
void Communicator::all_to_allv(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd, void* r,
                               std::span<const std::size_t> rc, std::span<const std::size_t> rd, DataType t) {
  coll::submit(*this, make_alltoallv(s, sc, sd, r, rc, rd, t), false);
}
void Communicator::gather(const void* s, void* r, std::size_t n, DataType t, int root) {
  coll::submit(*this, Call::of(CollOp::Gather, s, r, n, t, ReduceOp::Sum, root), false);
}
void Communicator::scatter(const void* s, void* r, std::size_t n, DataType t, int root) {
  coll::submit(*this, Call::of(CollOp::Scatter, s, r, n, t, ReduceOp::Sum, root), false);
}
void Communicator::barrier() {
  coll::submit(*this, Call::of(CollOp::Barrier, nullptr, nullptr, 0, DataType::Uint8), false);
}
void Communicator::send(const void* b, std::size_t n, DataType t, int peer) {
  coll::submit(*this, Call::of(CollOp::Send, b, nullptr, n, t, ReduceOp::Sum, peer), false);
}
void Communicator::recv(void* b, std::size_t n, DataType t, int peer) {
  coll::submit(*this, Call::of(CollOp::Recv, nullptr, b, n, t, ReduceOp::Sum, peer), false);
}
void Communicator::send_recv(const void* sb, std::size_t sc, int dest, void* rb, std::size_t rc, int source,
                             DataType t) {
  coll::submit(*this, make_sendrecv(sb, sc, dest, rb, rc, source, t), false);
}

Work Communicator::iall_reduce(const void* s, void* r, std::size_t n, DataType t, ReduceOp op) {
  return coll::submit(*this, Call::of(CollOp::AllReduce, s, r, n, t, op), true);
}
Work Communicator::iall_gather(const void* s, void* r, std::size_t n, DataType t) {
  return coll::submit(*this, Call::of(CollOp::AllGather, s, r, n, t), true);
}
Work Communicator::ireduce_scatter(const void* s, void* r, std::size_t n, DataType t, ReduceOp op) {
  return coll::submit(*this, Call::of(CollOp::ReduceScatter, s, r, n, t, op), true);
}
Work Communicator::ibroadcast(void* b, std::size_t n, DataType t, int root) {
  return coll::submit(*this, Call::of(CollOp::Broadcast, b, b, n, t, ReduceOp::Sum, root), true);
}
Work Communicator::ireduce(const void* s, void* r, std::size_t n, DataType t, ReduceOp op, int root) {
  return coll::submit(*this, Call::of(CollOp::Reduce, s, r, n, t, op, root), true);
}
Work Communicator::iall_to_all(const void* s, void* r, std::size_t n, DataType t) {
  return coll::submit(*this, Call::of(CollOp::AllToAll, s, r, n, t), true);
}
Work Communicator::iall_to_allv(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd,
                                void* r, std::span<const std::size_t> rc, std::span<const std::size_t> rd, DataType t) {
  return coll::submit(*this, make_alltoallv(s, sc, sd, r, rc, rd, t), true);
}
Work Communicator::igather(const void* s, void* r, std::size_t n, DataType t, int root) {
  return coll::submit(*this, Call::of(CollOp::Gather, s, r, n, t, ReduceOp::Sum, root), true);
}
Work Communicator::iscatter(const void* s, void* r, std::size_t n, DataType t, int root) {
  return coll::submit(*this, Call::of(CollOp::Scatter, s, r, n, t, ReduceOp::Sum, root), true);
}
Work Communicator::ibarrier() {
  return coll::submit(*this, Call::of(CollOp::Barrier, nullptr, nullptr, 0, DataType::Uint8), true);
}
Work Communicator::isend(const void* b, std::size_t n, DataType t, int peer) {
  return coll::submit(*this, Call::of(CollOp::Send, b, nullptr, n, t, ReduceOp::Sum, peer), true);
}
Work Communicator::irecv(void* b, std::size_t n, DataType t, int peer) {
  return coll::submit(*this, Call::of(CollOp::Recv, nullptr, b, n, t, ReduceOp::Sum, peer), true);
}
Work Communicator::isend_recv(const void* sb, std::size_t sc, int dest, void* rb, std::size_t rc, int source,
                              DataType t) {
  return coll::submit(*this, make_sendrecv(sb, sc, dest, rb, rc, source, t), true);
}

}  // namespace rdmx
