// SPDX-License-Identifier: MIT
#include "providers/verbs/verbs_device.hpp"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "driver/completion_queue.hpp"
#include "providers/verbs/port_select.hpp"
#include "providers/verbs/verbs_factory.hpp"
#include "providers/verbs/verbs_qp.hpp"
#include "services/config.hpp"
#include "services/cuda/dma_buf.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"
#include "topo/topo.hpp"

namespace rdmx::verbs {
namespace {

const char* port_state_name(ibv_port_state state) { return ibv_port_state_str(state); }

std::vector<GidEntry> read_gid_table(ibv_context* context, int port, int table_len) {
  std::vector<GidEntry> out;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context, static_cast<std::uint32_t>(port), static_cast<std::uint32_t>(i), &entry, 0) != 0) {
      continue;  // an empty slot (ENODATA) or one that cannot be read
    }
    GidEntry g;
    g.index = i;
    std::memcpy(g.gid.data(), entry.gid.raw, 16);
    if (std::all_of(g.gid.begin(), g.gid.end(), [](std::uint8_t b) { return b == 0; })) continue;
    g.type = entry.gid_type == IBV_GID_TYPE_ROCE_V2   ? GidType::RoceV2
             : entry.gid_type == IBV_GID_TYPE_ROCE_V1 ? GidType::RoceV1
                                                      : GidType::Ib;
    if (entry.ndev_ifindex != 0) {
      char name[IF_NAMESIZE] = {};
      if (if_indextoname(entry.ndev_ifindex, name) != nullptr) g.netdev = name;
    }
    out.push_back(g);
  }
  return out;
}

// Everything ibv_get_device_list found, for messages.
std::string list_devices(ibv_device** list, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::string(ibv_get_device_name(list[i]));
  return out;
}

struct Opened {
  ContextHandle context;
  ibv_device_attr attr;
  PortChoice port;
};

constexpr core::TextSetting kIbHca{
    "RDMX_IB_HCA", "auto",
    "verbs: devices[:port] to use, as NCCL_IB_HCA (prefixes; = exact names; ^ excludes); auto: the first device "
    "with an active port"};
RDMX_SETTING(kIbHca);
constexpr core::TextSetting kIbGidIndex{
    "RDMX_IB_GID_INDEX", "auto",
    "verbs: RoCE GID table index; auto: RoCE v2 with an IPv4 address, else RoCE v2, else v1"};
RDMX_SETTING(kIbGidIndex);

// The first admitted device and port that is ACTIVE and addressable.
Opened open_first_usable() {
  const HcaFilter filter = HcaFilter::parse(kIbHca.read().value_or(""));
  const std::optional<int> forced_gid = parse_gid_index(kIbGidIndex.read());
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr || count == 0) {
    const int err = errno;
    if (list != nullptr) ibv_free_device_list(list);
    const topo::RdmaScan scan = topo::scan_rdma_devices();
    // The sysfs scan says why in words ("no RDMA device: ... no RDMA driver is loaded").
    std::string why = scan.devices.empty() ? scan.note
                                           : "no RDMA device: libibverbs has no driver for the devices "
                                             "in /sys/class/infiniband (is ibverbs-providers installed?)";
    if (list == nullptr && err != 0 && err != ENOSYS) why += "; ibv_get_device_list: " + errno_text(err);
    throw Error(ErrorCode::NotFound, why,
                {.op = "open_device verbs",
                 .hint = "load the NIC's RDMA driver (e.g. mlx5_ib) and its libibverbs provider "
                         "(ibverbs-providers), or try soft-RoCE: modprobe rdma_rxe && rdma link add rxe0 type rxe "
                         "netdev eth0; else choose another provider: RDMX_PROVIDER=tcp"});
  }
  std::unique_ptr<ibv_device*, void (*)(ibv_device**)> devices(list, ibv_free_device_list);
  std::vector<ibv_device*> sorted(list, list + count);
  std::sort(sorted.begin(), sorted.end(), [](ibv_device* a, ibv_device* b) {
    return std::strcmp(ibv_get_device_name(a), ibv_get_device_name(b)) < 0;
  });
  std::string rejected;
  auto reject = [&](const std::string& what) { rejected += (rejected.empty() ? "" : "; ") + what; };
  std::optional<Error> gid_error;
  for (ibv_device* dev : sorted) {
    const std::string name = ibv_get_device_name(dev);
    ibv_context* raw = ibv_open_device(dev);
    if (raw == nullptr) {
      reject(name + ": ibv_open_device failed: " + errno_text(errno) + " (is /dev/infiniband/uverbs* readable?)");
      continue;
    }
    ContextHandle context(raw, [](ibv_context* c) { ibv_close_device(c); });
    ibv_device_attr attr{};
    if (ibv_query_device(raw, &attr) != 0) {
      reject(name + ": ibv_query_device failed: " + errno_text(errno));
      continue;
    }
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
      const std::string where = name + ":" + std::to_string(port);
      if (!filter.admits(name, port)) {
        reject(where + " excluded by RDMX_IB_HCA=" + filter.text());
        continue;
      }
      ibv_port_attr pattr{};
      if (ibv_query_port(raw, static_cast<std::uint8_t>(port), &pattr) != 0) {
        reject(where + ": ibv_query_port failed: " + errno_text(errno));
        continue;
      }
      if (pattr.state != IBV_PORT_ACTIVE) {
        reject(where + " is " + port_state_name(pattr.state) + ", not ACTIVE");
        continue;
      }
      PortChoice choice;
      choice.device = name;
      choice.port = port;
      choice.active_mtu = pattr.active_mtu;
      choice.link_layer = pattr.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::Ethernet : LinkLayer::InfiniBand;
      choice.lid = pattr.lid;
      choice.max_msg_size = pattr.max_msg_sz;
      const auto table = read_gid_table(raw, port, pattr.gid_tbl_len);
      if (choice.link_layer == LinkLayer::Ethernet || forced_gid) {
        try {
          GidChoice gid = choose_gid(table, forced_gid, where);
          choice.gid_index = gid.entry.index;
          choice.gid = gid.entry.gid;
          choice.gid_type = gid.entry.type;
          choice.why = gid.why;
        } catch (const Error& e) {
          if (!gid_error) gid_error = e;
          reject(where + ": " + e.message());
          continue;
        }
      } else {
        if (pattr.lid == 0) {
          reject(where + " is InfiniBand but has no LID yet (is a subnet manager running?)");
          continue;
        }
        choice.why = "InfiniBand LID " + std::to_string(pattr.lid);
      }
      return {context, attr, choice};
    }
  }
  if (gid_error && filter.empty() == false) throw *gid_error;
  if (gid_error && count == 1) throw *gid_error;
  throw Error(ErrorCode::NotFound, "no usable RDMA port: " + rejected,
              {.op = "open_device verbs",
               .sizes = "devices: " + list_devices(list, count),
               .hint = "bring a port up (ibv_devinfo shows its state), fix RDMX_IB_HCA / RDMX_IB_GID_INDEX, or "
                       "choose another provider: RDMX_PROVIDER=tcp"});
}

}  // namespace

std::string errno_text(int err) { return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")"; }

int access_flags(Access access) {
  int flags = 0;
  if (has(access, Access::LocalWrite)) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (has(access, Access::RemoteWrite)) flags |= IBV_ACCESS_REMOTE_WRITE;
  if (has(access, Access::RemoteRead)) flags |= IBV_ACCESS_REMOTE_READ;
  if (has(access, Access::RemoteAtomic)) flags |= IBV_ACCESS_REMOTE_ATOMIC;
  return flags;
}

// ---------------------------------------------------------------------------
// Binder

namespace {
class PdDomain final : public core::RegionBinder::Domain {
 public:
  explicit PdDomain(ibv_pd* pd) : pd_(pd) {}
  ~PdDomain() override {
    if (int err = ibv_dealloc_pd(pd_); err != 0) {
      RDMX_WARN("ibv_dealloc_pd failed: %s (regions or QPs of this protection domain still exist?)",
                std::strerror(err));
    }
  }
  ibv_pd* pd() const { return pd_; }

 private:
  ibv_pd* pd_;
};

class MrBinding final : public core::RegionBinder::Binding {
 public:
  explicit MrBinding(ibv_mr* mr) : mr_(mr) {}
  ~MrBinding() override {
    if (int err = ibv_dereg_mr(mr_); err != 0) RDMX_WARN("ibv_dereg_mr failed: %s", std::strerror(err));
  }
  std::uint32_t lkey() const override { return mr_->lkey; }
  std::uint32_t rkey() const override { return mr_->rkey; }

 private:
  ibv_mr* mr_;
};

// What zero-length regions register: they cover no memory, but get keys the
// hardware knows, so they can never collide with a real region's.
unsigned char g_empty_region_byte;
}  // namespace

std::unique_ptr<core::RegionBinder::Domain> VerbsBinder::open_domain() {
  ibv_pd* pd = ibv_alloc_pd(context_.get());
  if (pd == nullptr) {
    throw Error(ErrorCode::System, "ibv_alloc_pd failed on " + device_ + ": " + errno_text(errno),
                {.op = "alloc_pd", .hint = "the device may be out of resources; check dmesg"});
  }
  return std::make_unique<PdDomain>(pd);
}

ibv_pd* VerbsBinder::pd_of(const Domain& domain) { return static_cast<const PdDomain&>(domain).pd(); }

std::unique_ptr<core::RegionBinder::Binding> VerbsBinder::bind(Domain& domain, void* addr, std::size_t length,
                                                               Access access, MemoryType memory, int gpu) {
  ibv_pd* pd = pd_of(domain);
  if (memory == MemoryType::Cuda && length > 0) return bind_device_memory(pd, addr, length, access, gpu);
  ibv_mr* mr =
      length == 0 ? ibv_reg_mr(pd, &g_empty_region_byte, 1, 0) : ibv_reg_mr(pd, addr, length, access_flags(access));
  if (mr == nullptr) {
    const int err = errno;
    char sizes[96];
    std::snprintf(sizes, sizeof(sizes), "addr=%p length=%zu", addr, length);
    std::string hint = "check that the whole range is mapped memory of this process";
    if (err == ENOMEM || err == EAGAIN) {
      rlimit lim{};
      ::getrlimit(RLIMIT_MEMLOCK, &lim);
      hint = "the device must pin the pages and the locked-memory limit is " +
             (lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_cur) + " bytes") +
             ": raise it (ulimit -l unlimited; LimitMEMLOCK=infinity in systemd; --ulimit memlock=-1 in docker)";
    }
    throw Error(ErrorCode::System, "ibv_reg_mr failed on " + device_ + ": " + errno_text(err),
                {.op = "register_memory " + to_string(access), .sizes = sizes, .hint = hint});
  }
  return std::make_unique<MrBinding>(mr);
}

// GPUDirect RDMA: the NIC registers the GPU's pages through a dma-buf the
// CUDA driver exports, and moves data to and from them with no host copy.
// Built and documented, not yet run: no machine here has a NIC and a GPU
// together (docs/GPU.md).
std::unique_ptr<core::RegionBinder::Binding> VerbsBinder::bind_device_memory(ibv_pd* pd, void* addr, std::size_t length,
                                                                             Access access, int gpu) {
  char sizes[96];
  std::snprintf(sizes, sizeof(sizes), "addr=%p length=%zu gpu=%d", addr, length, gpu);
#if RDMX_HAVE_IBV_REG_DMABUF_MR
  const core::cuda::DmaBuf buf = core::cuda::export_dma_buf(addr, length, gpu, "register_memory");
  ibv_mr* mr =
      ibv_reg_dmabuf_mr(pd, buf.offset, length, reinterpret_cast<std::uint64_t>(addr), buf.fd, access_flags(access));
  const int err = errno;
  ::close(buf.fd);  // the region holds the dma-buf as long as it needs it
  if (mr == nullptr) {
    throw Error(ErrorCode::NotSupported, "ibv_reg_dmabuf_mr failed on " + device_ + ": " + errno_text(err),
                {.op = "register_memory " + to_string(access),
                 .sizes = sizes,
                 .hint = "the NIC's kernel driver must take dma-buf regions (mlx5 does, from Linux 5.12); "
                         "otherwise use tcp or shm, which stage device memory"});
  }
  return std::make_unique<MrBinding>(mr);
#else
  (void)pd;
  (void)access;
  throw Error(ErrorCode::NotSupported, "this librdmx was built with a libibverbs without ibv_reg_dmabuf_mr",
              {.op = "register_memory", .sizes = sizes, .hint = "rebuild with rdma-core 34 or later"});
#endif
}

std::string VerbsBinder::probe_dma_buf(bool* supported) {
  *supported = false;
#if RDMX_HAVE_IBV_REG_DMABUF_MR
  // A registration of no dma-buf at all: a kernel and NIC driver that take
  // dma-buf regions complain about the descriptor (EBADF), the others say
  // they do not support the call.
  ibv_pd* pd = ibv_alloc_pd(context_.get());
  if (pd == nullptr) return "ibv_alloc_pd failed: " + errno_text(errno);
  ibv_mr* mr = ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE);
  const int err = errno;
  if (mr != nullptr) ibv_dereg_mr(mr);
  ibv_dealloc_pd(pd);
  if (mr == nullptr && (err == EOPNOTSUPP || err == EPROTONOSUPPORT || err == ENOSYS)) {
    return "none: " + device_ + " or its kernel driver takes no dma-buf regions (" + errno_text(err) + ")";
  }
  *supported = true;
  return "dma-buf: GPUDirect RDMA through ibv_reg_dmabuf_mr (not yet run on real hardware)";
#else
  return "none: libibverbs has no ibv_reg_dmabuf_mr (rdma-core older than 34)";
#endif
}

// ---------------------------------------------------------------------------
// Device

VerbsDevice::VerbsDevice(ContextHandle context, const ibv_device_attr& attr, PortChoice port, std::string why,
                         core::DeviceResources resources)
    : context_(std::move(context)), port_(std::move(port)), resources_(std::move(resources)), attr_(attr) {
  name_ = "verbs:" + port_.device + ":" + std::to_string(port_.port);
  if (port_.link_layer == LinkLayer::Ethernet) {
    name_ += "/" + gid_to_string(port_.gid);
  } else {
    name_ += "/lid" + std::to_string(port_.lid);
  }
  why_ = why + "; " + port_.device + " port " + std::to_string(port_.port) + " (" +
         (port_.link_layer == LinkLayer::Ethernet ? "RoCE" : "InfiniBand") + ", active MTU " +
         std::to_string(128 << port_.active_mtu) + "): " + port_.why;

  caps_.remote_peers = true;
  caps_.same_host_peers = true;
  caps_.auto_progress = true;  // the NIC answers READ and atomics
  // HCAs write in address order in practice, but nothing enforces it for
  // every device: not claimed (see DeviceCaps).
  caps_.ordered_write_placement = false;
  caps_.direct_registered_writes = true;  // the NIC places every WRITE by DMA, wherever it lands
  caps_.registration_pins_memory = true;
  // IB's largest message; RDMA longer than the port's own limit (8 MiB on
  // rxe, 1 GiB on ConnectX) is split into several work requests.
  caps_.max_msg_size = 1ull << 31;
  caps_.max_qp_wr = static_cast<std::uint32_t>(std::min(attr_.max_qp_wr / 2, 16384));
  caps_.max_sge = static_cast<std::uint32_t>(
      std::min({attr_.max_sge, attr_.max_sge_rd > 0 ? attr_.max_sge_rd : attr_.max_sge, 32}));
  inline_limit_ = 0;
  caps_.max_inline_data = 0;
  caps_.latency_us = core::provider_verbs.figures.latency_us;
  caps_.bandwidth_gbps = core::provider_verbs.figures.bandwidth_gbps;

  channel_ = ibv_create_comp_channel(context_.get());
  if (channel_ == nullptr) {
    throw Error(ErrorCode::System, "ibv_create_comp_channel failed on " + port_.device + ": " + errno_text(errno),
                {.op = "open_device verbs"});
  }
  ::fcntl(channel_->fd, F_SETFL, ::fcntl(channel_->fd, F_GETFL) | O_NONBLOCK);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    const int err = errno;
    ibv_destroy_comp_channel(channel_);
    throw Error(ErrorCode::System, "eventfd failed: " + errno_text(err), {.op = "open_device verbs"});
  }
  // The largest inline payload the device takes, learnt from a throwaway QP.
  inline_limit_ = VerbsQp::probe_inline_limit(*this);
  caps_.max_inline_data = inline_limit_;
  bool dma_buf = false;
  why_ += "; device memory: " + VerbsBinder(context_, port_.device).probe_dma_buf(&dma_buf);
  caps_.cuda_memory = dma_buf ? CudaMemorySupport::DmaBuf : CudaMemorySupport::None;
  // One binder per registry: the hardware sees every region of every PD.
  if (registry().binder() == nullptr) registry().set_binder(std::make_shared<VerbsBinder>(context_, port_.device));
  engine_ = std::thread([this] { engine_main(); });
}

VerbsDevice::~VerbsDevice() {
  stopping_.store(true);
  parking_.wake();
  const std::uint64_t one = 1;
  [[maybe_unused]] auto w = ::write(wake_fd_, &one, sizeof(one));
  if (engine_.joinable()) engine_.join();
  ::close(wake_fd_);
  if (int err = ibv_destroy_comp_channel(channel_); err != 0) {
    RDMX_WARN("ibv_destroy_comp_channel failed: %s (QPs of this device still exist?)", std::strerror(err));
  }
}

std::unique_ptr<ProtectionDomain> VerbsDevice::alloc_pd() {
  return core::make_device_pd(std::make_shared<core::RegistryProtectionDomain>(
      hold(core::ChildKind::ProtectionDomain), registry(), provider(), caps().cuda_memory));
}

std::unique_ptr<CompletionQueue> VerbsDevice::create_cq(std::size_t depth) {
  return core::make_device_cq(depth, *this, *this, hold(core::ChildKind::CompletionQueue));
}

std::unique_ptr<QueuePair> VerbsDevice::create_qp(ProtectionDomain& pd, CompletionQueue& send_cq,
                                                  CompletionQueue& recv_cq, const QpCaps& caps) {
  auto parts = core::check_qp_parts(pd, send_cq, recv_cq, registry(), hold(core::ChildKind::QueuePair));
  if (parts.pd.bound() == nullptr) {
    throw Error(ErrorCode::InvalidArgument, "protection domain was created before the verbs device was opened",
                {.op = "create_qp", .hint = "open the device first, then allocate the PD from it"});
  }
  return std::make_unique<VerbsQp>(*this, parts, caps);
}

void VerbsDevice::add_qp(VerbsQp* qp) {
  core::LockGuard lock(mutex_);
  qps_.push_back(qp);
  qp->arm();  // harmless while the engine is parked: one event at most
}

void VerbsDevice::remove_qp(VerbsQp* qp) {
  core::LockGuard lock(mutex_);
  std::erase(qps_, qp);
}

std::size_t VerbsDevice::progress() {
  parking_.note_application_activity();
  if (!mutex_.try_lock()) return 0;  // the engine is draining right now
  core::LockGuard lock(mutex_, core::kAdoptLock);
  std::size_t did = 0;
  for (VerbsQp* qp : qps_) did += qp->drain();
  return did;
}

void VerbsDevice::arm_and_drain_all_locked() {
  // Arm first, then drain: a completion that lands in between raises an event.
  for (VerbsQp* qp : qps_) qp->arm();
  for (VerbsQp* qp : qps_) qp->drain();
}

void VerbsDevice::engine_main() {
  pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stopping_.load()) {
    if (parking_.park_while_application_drives()) continue;
    {
      core::LockGuard lock(mutex_);
      arm_and_drain_all_locked();
    }
    // Sleep until a completion event, or the park period: the application
    // may have gone idle without sleeping in a CQ wait.
    int n = ::poll(fds, 2, 100);
    if (n < 0 && errno != EINTR) {
      RDMX_WARN("verbs engine: poll failed: %s", std::strerror(errno));
      break;
    }
    if (stopping_.load()) break;
    if (fds[1].revents & POLLIN) {
      std::uint64_t v;
      [[maybe_unused]] auto r = ::read(wake_fd_, &v, sizeof(v));
    }
    if (fds[0].revents & POLLIN) {
      for (;;) {
        ibv_cq* cq = nullptr;
        void* context = nullptr;
        if (ibv_get_cq_event(channel_, &cq, &context) != 0) break;  // EAGAIN: no more events
        core::LockGuard lock(mutex_);
        ibv_ack_cq_events(cq, 1);  // first: destroying the CQ waits for its events' acks
        auto it = std::find(qps_.begin(), qps_.end(), static_cast<VerbsQp*>(context));
        if (it != qps_.end()) (*it)->drain();  // else destroyed since
      }
    }
  }
}

// ---------------------------------------------------------------------------

std::shared_ptr<Device> open_verbs_device(const std::string& why, core::DeviceResources resources) {
  Opened opened = open_first_usable();
  auto device = std::make_shared<VerbsDevice>(opened.context, opened.attr, opened.port, why, std::move(resources));
  return device;
}

bool is_verbs_address(const QpAddress& address) { return VerbsAddress::is_verbs(address); }

bool reaches(const Device& device, const QpAddress& address, std::string* why) {
  const auto& self = static_cast<const VerbsDevice&>(device).port();
  VerbsAddress peer;
  try {
    peer = VerbsAddress::decode(address);
  } catch (const Error& e) {
    *why = e.message();
    return false;
  }
  if (peer.link_layer != self.link_layer) {
    *why = std::string("verbs: the peer's port is ") +
           (peer.link_layer == LinkLayer::Ethernet ? "RoCE" : "InfiniBand") + ", this one is not";
    return false;
  }
  if (self.link_layer == LinkLayer::Ethernet && is_ipv4_mapped(self.gid) != is_ipv4_mapped(peer.gid)) {
    *why = "verbs: one side addresses by IPv4 GID, the other by IPv6 (set RDMX_IB_GID_INDEX alike)";
    return false;
  }
  *why = "verbs: both sides have " + std::string(self.link_layer == LinkLayer::Ethernet ? "RoCE" : "InfiniBand") +
         " ports (" + device.name() + " to " + peer.to_string() + ")";
  return true;
}

}  // namespace rdmx::verbs
