// SPDX-License-Identifier: MIT
// connect_mesh(): a full mesh of RC QPs through a store.
//
// Rank r creates one QP per peer p and publishes its address under
// "<tag>/<r>/<p>"; it then reads "<tag>/<p>/<r>" and connects. connect() does
// not wait for the peer, so no rank depends on the others connecting at the
// same moment; it only needs their addresses.
#include <string>
#include <vector>

#include "bootstrap/store_common.hpp"
#include "services/log.hpp"

namespace rdmx {
namespace {

std::string mesh_key(const std::string& tag, int source, int destination) {
  return tag + "/" + std::to_string(source) + "/" + std::to_string(destination);
}

}  // namespace

Mesh connect_mesh(Store& store, int rank, int world_size, Device& device, ProtectionDomain& pd,
                  CompletionQueue& send_cq, CompletionQueue& recv_cq, const QpCaps& caps, const std::string& tag) {
  std::vector<int> everyone;
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer != rank) everyone.push_back(peer);
  }
  return connect_mesh(store, rank, world_size, everyone, device, pd, send_cq, recv_cq, caps, tag);
}

Mesh connect_mesh(Store& store, int rank, int world_size, const std::vector<int>& peers, Device& device,
                  ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq, const QpCaps& caps,
                  const std::string& tag) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw Error(ErrorCode::InvalidArgument,
                "connect_mesh: rank " + std::to_string(rank) + " is not in a world of " + std::to_string(world_size),
                ErrorContext{.op = "connect_mesh",
                             .rank = rank,
                             .hint = "pass the rank and world size from from_env() / detect_launch()"});
  }
  if (tag.empty()) {
    throw Error(ErrorCode::InvalidArgument, "connect_mesh: the tag must not be empty",
                ErrorContext{.op = "connect_mesh", .rank = rank});
  }
  for (int peer : peers) {
    if (peer < 0 || peer >= world_size || peer == rank) {
      throw Error(ErrorCode::InvalidArgument,
                  "connect_mesh: rank " + std::to_string(rank) + " cannot connect to peer " + std::to_string(peer) +
                      " in a world of " + std::to_string(world_size),
                  ErrorContext{.op = "connect_mesh", .rank = rank, .hint = "peers are other ranks of the world"});
    }
  }
  Mesh mesh;
  mesh.qps.resize(static_cast<std::size_t>(world_size));

  // 1. One QP per peer, each published before waiting on anyone, so ranks
  //    arriving in any order make progress.
  for (int peer : peers) {
    auto& qp = mesh.qps[static_cast<std::size_t>(peer)];
    try {
      qp = device.create_qp(pd, send_cq, recv_cq, caps);
    } catch (const Error& e) {
      throw Error(e.code(),
                  "connect_mesh: cannot create the QP towards peer " + std::to_string(peer) + ": " + e.message(),
                  ErrorContext{.op = "connect_mesh create_qp",
                               .rank = rank,
                               .peer_rank = peer,
                               .sizes = "world_size=" + std::to_string(world_size),
                               .hint = e.context().hint});
    }
    mesh.keys.push_back(mesh_key(tag, rank, peer));
    store.set(mesh.keys.back(), std::string_view(qp->local_address().to_hex()));
  }

  // 2. Wait for every peer at once: on timeout the error lists exactly the
  //    ranks that never published.
  std::vector<std::string> peer_keys;
  for (int peer : peers) peer_keys.push_back(mesh_key(tag, peer, rank));
  try {
    if (!peer_keys.empty()) store.wait(peer_keys);
  } catch (const Error& e) {
    throw Error(e.code(),
                "connect_mesh: rank " + std::to_string(rank) + " did not get the addresses of all " +
                    std::to_string(peers.size()) + " peers: " + e.message(),
                ErrorContext{.op = "connect_mesh",
                             .rank = rank,
                             .peer_addr = e.context().peer_addr,
                             .sizes = e.context().sizes,
                             .hint = "keys are \"" + tag +
                                     "/<source rank>/<this rank>\"; a missing one means that "
                                     "rank did not reach connect_mesh (crashed, hung, or uses another tag/store)"});
  }

  // 3. Connect each QP to its peer's.
  for (int peer : peers) {
    std::string key = mesh_key(tag, peer, rank);
    try {
      QpAddress remote = QpAddress::from_hex(store.get_string(key));
      mesh.qps[static_cast<std::size_t>(peer)]->connect(remote, ConnectOptions{.peer_rank = peer});
    } catch (const Error& e) {
      throw Error(e.code(),
                  "connect_mesh: rank " + std::to_string(rank) + " cannot connect to peer " + std::to_string(peer) +
                      " (address from key " + bootstrap::printable_key(key) + "): " + e.message(),
                  ErrorContext{.op = "connect_mesh connect",
                               .rank = rank,
                               .peer_rank = peer,
                               .peer_addr = e.context().peer_addr,
                               .sizes = e.context().sizes,
                               .hint = e.context().hint.empty()
                                           ? "the peer may run another provider or rdmx version, or the key holds "
                                             "a stale address from an earlier job sharing the store"
                                           : e.context().hint});
    }
  }
  RDMX_INFO("connect_mesh '%s': rank %d connected to %zu peers", tag.c_str(), rank, peers.size());
  return mesh;
}

}  // namespace rdmx
