// SPDX-License-Identifier: MIT
// RDMX_IB_HCA and RDMX_IB_GID_INDEX rules, and the QP address layout: pure
// functions, tested without a device.
#include <gtest/gtest.h>

#include "providers/verbs/address.hpp"
#include "providers/verbs/port_select.hpp"
#include "rdmx/error.hpp"

namespace rdmx::verbs {
namespace {

TEST(HcaFilter, EmptyAdmitsEverything) {
  auto f = HcaFilter::parse("");
  EXPECT_TRUE(f.admits("mlx5_0", 1));
  EXPECT_TRUE(f.admits("rxe0", 2));
}

TEST(HcaFilter, NamesArePrefixesAndPortsOptional) {
  auto f = HcaFilter::parse("mlx5_1:1,rxe");
  EXPECT_TRUE(f.admits("mlx5_1", 1));
  EXPECT_FALSE(f.admits("mlx5_1", 2));
  EXPECT_TRUE(f.admits("mlx5_10", 1));  // prefix, as NCCL_IB_HCA
  EXPECT_FALSE(f.admits("mlx5_0", 1));
  EXPECT_TRUE(f.admits("rxe0", 1));
  EXPECT_TRUE(f.admits("rxe1", 3));
}

TEST(HcaFilter, EqualsMeansExactNames) {
  auto f = HcaFilter::parse("=mlx5_1");
  EXPECT_TRUE(f.admits("mlx5_1", 1));
  EXPECT_FALSE(f.admits("mlx5_10", 1));
}

TEST(HcaFilter, CaretExcludes) {
  auto f = HcaFilter::parse("^=mlx5_1:2");
  EXPECT_TRUE(f.admits("mlx5_1", 1));
  EXPECT_FALSE(f.admits("mlx5_1", 2));
  EXPECT_TRUE(f.admits("mlx5_10", 2));
  auto g = HcaFilter::parse("^rxe");
  EXPECT_FALSE(g.admits("rxe0", 1));
  EXPECT_TRUE(g.admits("mlx5_0", 1));
}

TEST(HcaFilter, MalformedValuesAreConfigErrorsThatSayWhy) {
  for (const char* bad : {"mlx5_0,,rxe0", "mlx5_0:x", "mlx5_0:", ":1", "^", "=", "mlx5_0:0"}) {
    try {
      HcaFilter::parse(bad);
      ADD_FAILURE() << "accepted RDMX_IB_HCA=" << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Config) << bad;
      EXPECT_NE(std::string(e.what()).find("RDMX_IB_HCA"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("device[:port]"), std::string::npos) << e.what();
    }
  }
}

GidEntry gid(int index, GidType type, std::initializer_list<std::uint8_t> tail, bool v4 = false) {
  GidEntry e;
  e.index = index;
  e.type = type;
  e.netdev = "eth0";
  if (v4) {
    e.gid[10] = 0xff;
    e.gid[11] = 0xff;
  } else {
    e.gid[0] = 0xfe;
    e.gid[1] = 0x80;
  }
  std::size_t i = 16 - tail.size();
  for (auto b : tail) e.gid[i++] = b;
  return e;
}

TEST(ChooseGid, PrefersRoceV2WithIpv4ThenRoceV2ThenV1) {
  const auto v1 = gid(0, GidType::RoceV1, {1});
  const auto v2_ll = gid(1, GidType::RoceV2, {1});
  const auto v1_v4 = gid(2, GidType::RoceV1, {10, 0, 0, 1}, true);
  const auto v2_v4 = gid(3, GidType::RoceV2, {10, 0, 0, 1}, true);
  EXPECT_EQ(choose_gid({v1, v2_ll, v1_v4, v2_v4}, std::nullopt, "dev:1").entry.index, 3);
  auto c = choose_gid({v1, v2_ll, v1_v4}, std::nullopt, "dev:1");
  EXPECT_EQ(c.entry.index, 1);
  EXPECT_NE(c.why.find("no IPv4-mapped"), std::string::npos) << c.why;
  EXPECT_EQ(choose_gid({v1}, std::nullopt, "dev:1").entry.index, 0);
  EXPECT_EQ(gid_to_string(v2_v4.gid), "::ffff:10.0.0.1");
}

TEST(ChooseGid, ForcedIndexIsUsedOrRefusedWithTheTable) {
  const auto v2_ll = gid(0, GidType::RoceV2, {1});
  const auto v2_v4 = gid(1, GidType::RoceV2, {10, 77, 0, 1}, true);
  auto c = choose_gid({v2_ll, v2_v4}, 0, "rxe0:1");
  EXPECT_EQ(c.entry.index, 0);
  EXPECT_NE(c.why.find("RDMX_IB_GID_INDEX=0"), std::string::npos);
  try {
    choose_gid({v2_ll, v2_v4}, 5, "rxe0:1");
    ADD_FAILURE() << "index 5 accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("RDMX_IB_GID_INDEX=5 names no valid GID on rxe0:1"), std::string::npos) << what;
    EXPECT_NE(what.find("0: fe80::1 RoCE v2 eth0"), std::string::npos) << what;
    EXPECT_NE(what.find("1: ::ffff:10.77.0.1 RoCE v2 eth0"), std::string::npos) << what;
  }
}

TEST(ChooseGid, EmptyTableSaysWhatToDo) {
  try {
    choose_gid({}, std::nullopt, "mlx5_0:1");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GID table is empty"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ip addr add"), std::string::npos) << e.what();
  }
}

TEST(GidIndexSetting, ParsesNumbersAndAuto) {
  EXPECT_EQ(parse_gid_index(std::nullopt), std::nullopt);
  EXPECT_EQ(parse_gid_index(std::string("auto")), std::nullopt);
  EXPECT_EQ(parse_gid_index(std::string("3")), 3);
  EXPECT_THROW(parse_gid_index(std::string("three")), Error);
  EXPECT_THROW(parse_gid_index(std::string("-1")), Error);
}

TEST(VerbsAddress, RoundTripsAndRejectsMalformedBytes) {
  VerbsAddress a;
  a.link_layer = LinkLayer::Ethernet;
  a.mtu = 5;
  a.port = 1;
  a.rd_atomic = 16;
  a.gid_type = static_cast<std::uint8_t>(GidType::RoceV2);
  a.gid = gid(1, GidType::RoceV2, {10, 77, 0, 1}, true).gid;
  a.hw_qpn = 0x11;
  a.psn = 0xabcdef;
  a.qpn = 7;
  const QpAddress bytes = a.encode();
  ASSERT_TRUE(VerbsAddress::is_verbs(bytes));
  const VerbsAddress b = VerbsAddress::decode(bytes);
  EXPECT_EQ(b.gid, a.gid);
  EXPECT_EQ(b.hw_qpn, 0x11u);
  EXPECT_EQ(b.psn, 0xabcdefu);
  EXPECT_EQ(b.mtu, 5);
  EXPECT_NE(b.to_string().find("::ffff:10.77.0.1 (RoCE v2)"), std::string::npos) << b.to_string();
  for (std::size_t i : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{6}}) {
    QpAddress bad = bytes;
    bad.bytes[i] = 0x7f;
    EXPECT_THROW(VerbsAddress::decode(bad), Error) << "byte " << i;
  }
  QpAddress short_one = bytes;
  short_one.bytes.pop_back();
  EXPECT_FALSE(VerbsAddress::is_verbs(short_one));
  EXPECT_THROW(VerbsAddress::decode(short_one), Error);
}

}  // namespace
}  // namespace rdmx::verbs
