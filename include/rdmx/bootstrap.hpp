// SPDX-License-Identifier: MIT
// rdmx/bootstrap.hpp: how ranks find each other.
//
// A Store is a small key-value service shared by all ranks of a job (as
// torch.distributed's TCPStore/FileStore and Gloo's rendezvous stores). Ranks
// publish QP addresses into it and read their peers'. from_env() recognises
// the launchers people use and opens the right store; connect_mesh() builds a
// full mesh of connected QPs through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rdmx/verbs.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

using Bytes = std::vector<std::uint8_t>;

// What a store holds, for checks that a job cleans up after itself (a
// communicator removes its keys when it is destroyed) and for tools.
struct StoreStats {
  std::int64_t keys = 0;      // keys held
  std::int64_t bytes = 0;     // what they take (TCP: as charged against RDMX_STORE_MAX_BYTES; file: value bytes)
  std::int64_t parked = -1;   // get/wait requests the server holds (-1: the store has no server)
  std::int64_t clients = -1;  // connections the server holds, the asking one included (-1: no server)
};

// Every blocking call takes a timeout; the overloads without one use
// RDMX_TIMEOUT. Errors are rdmx::Error: Timeout names the missing keys,
// PeerFailure names the store address when the server is gone.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  Bytes get(const std::string& key);
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys);
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and
  // returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // Returns true if the key existed and was removed.
  virtual bool remove(const std::string& key) = 0;
  // Sets `key` to `desired` if its current value equals `expected` (an empty
  // `expected` matches an absent key). Returns the value now stored.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Non-blocking existence test.
  virtual bool check(const std::string& key) = 0;
  // What the whole store holds now (a prefix store's too: it does not
  // filter). Stores that cannot tell throw NotSupported.
  virtual StoreStats stats();
  // The keys that begin with `prefix` ("" for all), sorted: for tools that
  // read what a job publishes (rdmx status). A prefix store lists its own
  // keys, without its prefix. Stores that cannot list throw NotSupported.
  virtual std::vector<std::string> keys(const std::string& prefix);

  // Convenience for strings.
  void set(const std::string& key, std::string_view value);
  std::string get_string(const std::string& key);
};

// The TCP store server. Run it in-process (rank 0 does this in from_env()) or
// standalone; it serves until destroyed.
class TcpStoreServer {
 public:
  // Listens on host:port; port 0 picks a free one (see port()).
  TcpStoreServer(const std::string& host, std::uint16_t port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  std::uint16_t port() const;

  struct RDMX_INTERNAL Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A client of a TcpStoreServer at host:port. Connecting retries until the
// timeout, since the server may start after its clients.
std::unique_ptr<Store> connect_tcp_store(const std::string& host, std::uint16_t port,
                                         std::chrono::milliseconds timeout);
// A store in a shared directory (local or network file system).
std::unique_ptr<Store> open_file_store(const std::string& directory);
// The store at `address` as RDMX_STORE takes it (host:port, [ipv6]:port or
// file:/dir), as a client: for tools that read a running job's store.
std::unique_ptr<Store> open_store(const std::string& address, std::chrono::milliseconds timeout);
// Keys are prefixed with `prefix` + "/" so several jobs or phases can share a store.
std::unique_ptr<Store> prefix_store(std::shared_ptr<Store> inner, std::string prefix);

// What the launcher told this process.
struct LaunchInfo {
  int rank = -1;
  int world_size = -1;
  int local_rank = -1;        // -1 when the launcher does not say
  int local_world_size = -1;  // -1 when the launcher does not say
  std::string launcher;       // "rdmx", "torchrun", "openmpi", "mpich", "slurm"
  std::string store_host;     // empty when none was given
  std::uint16_t store_port = 0;
  std::string store_file;  // RDMX_STORE=file:/path
};

// Reads the environment: RDMX_RANK/RDMX_WORLD_SIZE/RDMX_STORE (host:port or
// file:/dir), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/
// LOCAL_SIZE), MPICH/Hydra (PMI_RANK, PMI_SIZE, MPI_LOCALRANKID), Slurm
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID). RDMX_* wins over the others.
// Throws Config naming the variables that are missing or malformed.
LaunchInfo detect_launch();
// Whether any launcher's variables are set, i.e. detect_launch() would not
// fail with "no launcher recognised" (tools start their own ranks otherwise).
bool launcher_present();

// A fresh random job secret (64 hex digits) for RDMX_AUTH_KEY. A launcher
// gives every rank of one job the same secret, and the store and tcp QPs
// then accept only connections that prove it; `rdmx run` does this.
std::string new_job_secret();

// A joined job: this process's place and the store every rank shares.
struct Bootstrap {
  LaunchInfo info;
  // Declared before `store` so rank 0's own client disconnects before its server stops.
  std::shared_ptr<TcpStoreServer> server;  // set on the rank that serves the store
  std::shared_ptr<Store> store;
};
// detect_launch(), then open the store: with host:port, rank 0 serves it
// in-process (when the address is local) and every rank connects as a client.
// Sets the rank used in logs and errors.
Bootstrap from_env();

// A full mesh of RC QPs among `world_size` ranks: qps[peer] is connected to
// that peer (qps[rank] is null). Addresses are exchanged through `store`
// under keys prefixed by `tag`, so several meshes can be built in one job.
// Its peers read a rank's keys while they connect; once all of them have
// (they said so over the QPs), the rank may remove mesh.keys from the store.
struct Mesh {
  std::vector<std::unique_ptr<QueuePair>> qps;
  std::vector<std::string> keys;  // the keys this rank published
};
Mesh connect_mesh(Store& store, int rank, int world_size, Device& device, ProtectionDomain& pd,
                  CompletionQueue& send_cq, CompletionQueue& recv_cq, const QpCaps& caps = {},
                  const std::string& tag = "mesh");
// The same for some pairs only: qps[peer] for each rank in `peers`, which
// must name this rank among its own `peers` (a pair both sides connect);
// the other entries stay null. For replacing the broken connections of a
// set of ranks and keeping the rest.
Mesh connect_mesh(Store& store, int rank, int world_size, const std::vector<int>& peers, Device& device,
                  ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq, const QpCaps& caps = {},
                  const std::string& tag = "mesh");

}  // namespace rdmx
RDMX_API_END
