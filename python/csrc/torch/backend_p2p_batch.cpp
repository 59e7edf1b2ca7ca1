// SPDX-License-Identifier: MIT
// batch_isend_irecv: torch's coalescing of point-to-point calls. Between
// startCoalescing and endCoalescing the sends and recvs are kept, then run
// as one task in which each step sends the next message and receives one,
// together, as send_recv (header with header, payload with payload). A send larger than
// the stage limit completes only as its peer receives it, so sending first
// and receiving after would leave a ring of ranks each waiting for the next;
// paired, each rank's send and recv progress together, as Gloo's do.
// Collectives issued while coalescing (torch's *_coalesced calls) run as
// usual; the Work endCoalescing returns completes after all of it.
#include "backend.hpp"
#include "cuda_side.hpp"
#include "p2p_message.hpp"
#include "tensors.hpp"

namespace rdmx::torch_backend {

void ProcessGroupRdmx::startCoalescing() {
  if (coalescing_) {
    throw c10::Error("rdmx: startCoalescing while coalescing already (a coalescing manager inside another)");
  }
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::batch_message(bool is_send, const at::Tensor& tensor, int peer,
                                                               int tag) {
  auto work = c10::make_intrusive<RdmxWork>(getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
                                            std::vector<at::Tensor>{tensor});
  batch_.push_back(Message{is_send, tensor, peer, tag, work});
  coalesced_.push_back(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupRdmx::endCoalescing() {
  if (!coalescing_) throw c10::Error("rdmx: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<Message> batch = std::move(batch_);
  std::vector<c10::intrusive_ptr<RdmxWork>> works = std::move(coalesced_);
  batch_.clear();
  coalesced_.clear();
  if (!batch.empty()) {
    std::vector<at::Tensor> tensors;
    for (const auto& m : batch) tensors.push_back(m.tensor);
    auto exchanged = issue_task(
        c10d::OpType::COALESCED, {}, [this, batch] { exchange(batch); }, "batch_isend_irecv", true, tensors);
    // Each message's own Work waits for the task that moves it.
    const auto& handle = static_cast<RdmxWork&>(*exchanged).handle();
    for (const auto& m : batch) m.work->attach(handle);
  }
  // In call order after everything coalesced: done when all of it is, failed with the first error.
  return issue_task(
      c10d::OpType::COALESCED, {},
      [works] {
        for (const auto& w : works) {
          if (auto error = w->exception()) std::rethrow_exception(error);
        }
      },
      "coalesced calls", true);
}

void ProcessGroupRdmx::exchange(const std::vector<Message>& batch) {
  std::vector<const Message*> sends, recvs;
  for (const auto& m : batch) (m.send ? sends : recvs).push_back(&m);
  std::size_t next_send = 0;
  std::vector<bool> received(recvs.size(), false);
  // The first recv not yet satisfied, after taking what earlier steps kept for any of them.
  auto next_recv = [&]() -> const Message* {
    const Message* first = nullptr;
    for (std::size_t i = 0; i < recvs.size(); ++i) {
      if (received[i]) continue;
      if (take_early(recvs[i]->tensor, recvs[i]->peer, recvs[i]->tag)) {
        received[i] = true;
        recvs[i]->work->complete(nullptr);
      } else if (first == nullptr) {
        first = recvs[i];
      }
    }
    return first;
  };
  auto mark = [&](const Message* r) {
    for (std::size_t i = 0; i < recvs.size(); ++i) {
      if (recvs[i] == r) received[i] = true;
    }
    r->work->complete(nullptr);
  };
  try {
    // Each step sends one message and receives one, together: every rank of
    // a ring (or any exchange) makes progress whatever its sends' sizes. A
    // message received for another recv of the batch is kept for it.
    for (;;) {
      const Message* s = next_send < sends.size() ? sends[next_send] : nullptr;
      const Message* r = next_recv();
      if (s == nullptr && r == nullptr) break;
      if (s != nullptr && r != nullptr) {
        if (exchange_pair(*s, *r)) mark(r);
      } else if (s != nullptr) {
        send_tagged(s->tensor, s->peer, s->tag);
      } else {
        recv_tagged(r->tensor, r->peer, r->tag);
        mark(r);
      }
      if (s != nullptr) {
        s->work->complete(nullptr);
        ++next_send;
      }
    }
  } catch (...) {
    // What was not moved fails with the error; the group is unusable after it.
    const auto error = std::current_exception();
    for (const auto& m : batch) {
      if (!m.work->isCompleted()) m.work->complete(error);
    }
    throw;
  }
}

bool ProcessGroupRdmx::exchange_pair(const Message& s, const Message& r) {
  Communicator& comm = communicator();
  Dense out = dense_input(s.tensor);
  settle(out.buf);
  Dense in = dense_output(r.tensor);
  Header mine{s.tag, byte_size(out.buf)}, theirs;
  comm.send_recv(&mine, sizeof mine, s.peer, &theirs, sizeof theirs, r.peer, DataType::Uint8);
  // The first payload received goes together with this rank's payload.
  bool send_pending = mine.bytes != 0;
  auto receive = [&](void* buf, std::size_t bytes) {
    if (send_pending) {
      comm.send_recv(out.data(), mine.bytes, s.peer, buf, bytes, r.peer, DataType::Uint8);
      send_pending = false;
    } else {
      comm.recv(buf, bytes, DataType::Uint8, r.peer);
    }
  };
  const bool matched = accept(theirs.tag, theirs.bytes, in, r.peer, r.tag, receive);
  if (send_pending) comm.send(out.data(), mine.bytes, DataType::Uint8, s.peer);
  return matched;
}

}  // namespace rdmx::torch_backend
