// Shared memory a worker may be handed by anyone: the segment header and its checks, the guarded
// copy that turns a truncated mapping's SIGBUS into an error, and telling a gone creator apart.
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "transport/arena_fence.hpp"
#include "transport/exception_text.hpp"
#include "transport/posix_check.hpp"
#include "transport/process_watch.hpp"
#include "transport/shm_ring.hpp"
#include "transport/shm_segment.hpp"

using namespace hotswap;
using transport::ShmKind;
using transport::ShmSegment;
using namespace std::chrono_literals;

namespace {

std::string unique_name(const std::string& what) {
  return "/hotswap-" + std::to_string(::getpid()) + "-test-" + what;
}

bool exists(const std::string& name) {
  return std::filesystem::exists("/dev/shm" + name);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shared_memory)

BOOST_AUTO_TEST_CASE(a_read_of_a_truncated_mapping_is_reported_instead_of_crashing) {
  auto made = ShmSegment::create(unique_name("truncated"), ShmKind::kWeightArena, 1 << 20);
  std::memset(made.payload(), 7, made.payload_size());
  // A worker's view of it: mapped under a guard.
  auto segment =
      ShmSegment::open(made.name(), ShmKind::kWeightArena, ShmSegment::Access::kReadOnly);
  std::vector<std::uint8_t> out(segment.payload_size());
  std::memcpy(out.data(), segment.payload(), out.size());
  BOOST_TEST(out[12345] == 7);
  BOOST_TEST(!segment.faulted());
  int fd = ::shm_open(segment.name().c_str(), O_RDWR, 0);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(::ftruncate(fd, 0) == 0);  // what a buggy trainer does
  ::close(fd);
  // Read on another thread, as libtorch's copies are: zeros, and a mark, not SIGBUS.
  std::thread reader([&] { std::memcpy(out.data(), segment.payload(), out.size()); });
  reader.join();
  BOOST_TEST(segment.faulted());
  BOOST_TEST(out[12345] == 0);
  HOTSWAP_CHECK_THROW_MSG(segment.check_intact(), protocol::TransferError,
                          "shrank from 1048640 to 0 bytes after the handshake");
  // Other segments are untouched by it.
  auto other = ShmSegment::create(unique_name("other"), ShmKind::kWeightArena, 64);
  auto other_view =
      ShmSegment::open(other.name(), ShmKind::kWeightArena, ShmSegment::Access::kReadOnly);
  BOOST_TEST(!other_view.faulted());
  other_view.check_intact();
}

BOOST_AUTO_TEST_CASE(only_segments_with_a_matching_hotswap_header_open) {
  auto ring = transport::ShmRing::create({unique_name("ring-0")}, 4096, 1);
  auto opened = transport::ShmRing::open({unique_name("ring-0")});
  BOOST_TEST(opened.buffer_bytes() == 4096u);
  BOOST_TEST(opened.creator().pid == ::getpid());
  HOTSWAP_CHECK_THROW_MSG(
      ShmSegment::open(unique_name("ring-0"), ShmKind::kWeightArena, ShmSegment::Access::kReadOnly),
      protocol::ValueError, "is a ring buffer, not a weight arena");
  HOTSWAP_CHECK_THROW_MSG(
      ShmSegment::open("/other-program", ShmKind::kRingBuffer, ShmSegment::Access::kReadOnly),
      protocol::ValueError, "is not a hotswap shared-memory segment name");
  HOTSWAP_CHECK_THROW_MSG(
      ShmSegment::open(unique_name("absent"), ShmKind::kRingBuffer, ShmSegment::Access::kReadOnly),
      protocol::ValueError, "cannot be opened: No such file or directory");
  // Under hotswap's prefix but not hotswap's: no header, or resized after it was made.
  const std::string plain = unique_name("plain");
  int fd = ::shm_open(plain.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(::ftruncate(fd, 4096) == 0);
  ::close(fd);
  HOTSWAP_CHECK_THROW_MSG(
      ShmSegment::open(plain, ShmKind::kRingBuffer, ShmSegment::Access::kReadOnly),
      protocol::ValueError, "has no hotswap header");
  BOOST_TEST(!ShmSegment::unlink_if_orphaned(plain));  // never removes what it did not verify
  BOOST_TEST(exists(plain));
  ::shm_unlink(plain.c_str());
  auto grown = ShmSegment::create(unique_name("grown"), ShmKind::kWeightArena, 64);
  fd = ::shm_open(grown.name().c_str(), O_RDWR, 0);
  BOOST_REQUIRE(::ftruncate(fd, 1 << 16) == 0);
  ::close(fd);
  HOTSWAP_CHECK_THROW_MSG(
      ShmSegment::open(grown.name(), ShmKind::kWeightArena, ShmSegment::Access::kReadOnly),
      protocol::ValueError, "it was resized after it was made");
}

BOOST_AUTO_TEST_CASE(a_chunk_streams_to_its_consumer_before_it_is_published) {
  auto producer = transport::ShmRing::create({unique_name("stream-0")}, 4096, 1);
  auto consumer = transport::ShmRing::open({unique_name("stream-0")});
  std::uint8_t* out = producer.acquire_for_write(1, 50ms);
  std::memset(out, 7, 100);
  producer.advance(1, 100);
  const std::uint8_t* in = consumer.acquire_for_read(1, 100, 50ms);
  BOOST_TEST(in[99] == 7);
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(1, 101, 20ms), protocol::TimeoutError,
                          "chunk 1 (its first 101 bytes) did not arrive");
  std::memset(out + 100, 8, 3996);
  producer.advance(1, 4096);
  BOOST_TEST(consumer.acquire_for_read(1, 4096, 50ms)[4095] == 8);
  // Released before the producer publishes: the release counts (it used to be reset by the
  // publish, and the producer then waited for a release that had already come).
  consumer.release(1);
  producer.publish(1);
  BOOST_TEST(producer.acquire_for_write(2, 50ms) == out);
}

BOOST_AUTO_TEST_CASE(a_consumer_that_waits_for_the_publish_alone_still_reads_whole_chunks) {
  auto producer = transport::ShmRing::create({unique_name("whole-0")}, 4096, 1);
  auto consumer = transport::ShmRing::open({unique_name("whole-0")});
  std::memset(producer.acquire_for_write(1, 50ms), 3, 4096);  // no advances: an older producer
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(1, 1, 20ms), protocol::TimeoutError,
                          "did not arrive");
  producer.publish(1);
  BOOST_TEST(consumer.acquire_for_read(1, 4096, 50ms)[0] == 3);
  // Not released yet: the producer may not refill the buffer.
  HOTSWAP_CHECK_THROW_MSG(producer.acquire_for_write(2, 20ms), protocol::TimeoutError,
                          "the workers did not release buffer");
  consumer.release(1);
  producer.acquire_for_write(2, 50ms);
}

BOOST_AUTO_TEST_CASE(a_chunk_abandoned_before_its_publish_frees_its_buffer) {
  auto producer = transport::ShmRing::create({unique_name("abandoned-0")}, 4096, 1);
  auto consumer = transport::ShmRing::open({unique_name("abandoned-0")});
  producer.acquire_for_write(1, 50ms);
  producer.publish(1);
  consumer.acquire_for_read(1, 4096, 50ms);
  consumer.release(1);
  // The next round's first chunk: half copied in, then the trainer's source failed.
  producer.acquire_for_write(2, 50ms);
  producer.advance(2, 2048);
  // The round after takes fresh sequence numbers and finds the buffer free at once; chunk 2
  // never completes for a consumer still waiting on it.
  producer.acquire_for_write(3, 50ms);
  producer.drain(50ms);
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(2, 2048, 20ms), protocol::TimeoutError,
                          "chunk 2");
}

BOOST_AUTO_TEST_CASE(a_consumer_waiting_on_an_abandoned_round_fails_at_once) {
  auto producer =
      transport::ShmRing::create({unique_name("abandon-0"), unique_name("abandon-1")}, 4096, 1);
  auto consumer = transport::ShmRing::open({unique_name("abandon-0"), unique_name("abandon-1")});
  producer.acquire_for_write(1, 50ms);
  producer.advance(1, 1024);
  // The trainer's source failed part-way through chunk 1 of a round of chunks 1 and 2: the
  // worker used to wait out its whole timeout (300 s by default) before it could take the next
  // round.
  producer.abandon_below(3);
  const auto start = std::chrono::steady_clock::now();
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(2, 1, std::chrono::seconds(30)),
                          protocol::TransferError,
                          "the trainer abandoned the round before chunk 2");
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(1, 2048, std::chrono::seconds(30)),
                          protocol::TransferError, "abandoned");
  BOOST_CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // A lower mark never undoes a higher one, and the next round's chunks are not affected.
  producer.abandon_below(2);
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(2, 1, 20ms), protocol::TransferError,
                          "abandoned");
  std::memset(producer.acquire_for_write(3, 50ms), 5, 4096);
  producer.publish(3);
  BOOST_TEST(consumer.acquire_for_read(3, 4096, 50ms)[4095] == 5);
}

BOOST_AUTO_TEST_CASE(a_chunk_published_before_its_round_was_abandoned_is_still_read_and_released) {
  auto producer =
      transport::ShmRing::create({unique_name("kept-0"), unique_name("kept-1")}, 4096, 1);
  auto consumer = transport::ShmRing::open({unique_name("kept-0"), unique_name("kept-1")});
  std::memset(producer.acquire_for_write(1, 50ms), 9, 4096);
  producer.publish(1);
  BOOST_TEST(consumer.acquire_for_read(1, 1024, 50ms)[1023] == 9);  // partly read
  producer.acquire_for_write(2, 50ms);
  producer.advance(2, 100);
  producer.abandon_below(3);  // the source failed while chunk 2 was being written
  // Chunk 1 is there: the worker reads it to the end and releases it (it once failed on its
  // next piece and never released it, and the next round's writer timed out on that buffer).
  BOOST_TEST(consumer.acquire_for_read(1, 4096, 50ms)[4095] == 9);
  consumer.release(1);
  HOTSWAP_CHECK_THROW_MSG(consumer.acquire_for_read(2, 4096, 50ms), protocol::TransferError,
                          "abandoned");
  producer.acquire_for_write(3, 50ms);  // chunk 1's buffer, free again
}

namespace {

// Buffers with room for a 512 KiB window: two pieces of it.
constexpr std::size_t kWindowedBuffer =
    transport::ShmRing::kProgressBytes + 2 * transport::ShmRing::kWindowPieceBytes + 100;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> out(n);
  for (std::size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::uint8_t>(i * 131 + seed + i / 4093);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_chunk_larger_than_the_window_streams_through_it_to_every_consumer) {
  const std::vector<std::string> names{unique_name("window-0"), unique_name("window-1")};
  auto producer = transport::ShmRing::create(names, kWindowedBuffer, 2);
  auto first = transport::ShmRing::open(names);
  auto second = transport::ShmRing::open(names);
  BOOST_TEST(first.join_window());
  // One consumer has not joined (an older build would never): whole chunks.
  BOOST_TEST(producer.window_bytes() == 0u);
  BOOST_TEST(second.join_window());
  const std::size_t window = producer.window_bytes();
  BOOST_TEST(window == 2 * transport::ShmRing::kWindowPieceBytes);

  // Two chunks, each three windows and an odd tail, cut into slices at odd offsets (a slice
  // wraps around the window's end mid-piece).
  const std::size_t chunk = 3 * window + 12345;
  const std::vector<std::size_t> cuts{0, 1, 100003, 2 * window - 7, chunk};
  const auto a = pattern(chunk, 1), b = pattern(chunk, 2);
  auto consume = [&](transport::ShmRing& ring, std::vector<std::uint8_t>& into,
                     std::uint64_t sequence) {
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      ring.read_through_window(sequence, cuts[i], into.data() + cuts[i], cuts[i + 1] - cuts[i],
                               window, 5000ms);
    }
    ring.release(sequence);
  };
  std::vector<std::uint8_t> got[2][2] = {
      {std::vector<std::uint8_t>(chunk), std::vector<std::uint8_t>(chunk)},
      {std::vector<std::uint8_t>(chunk), std::vector<std::uint8_t>(chunk)}};
  std::thread c0([&] {
    consume(first, got[0][0], 1);
    consume(first, got[0][1], 2);
  });
  std::thread c1([&] {
    consume(second, got[1][0], 1);
    consume(second, got[1][1], 2);
  });
  for (std::uint64_t sequence : {1u, 2u}) {
    const auto& bytes = sequence == 1 ? a : b;
    producer.acquire_for_write(sequence, 5000ms);
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      producer.write_through_window(sequence, cuts[i], bytes.data() + cuts[i],
                                    cuts[i + 1] - cuts[i], window, 5000ms, {});
    }
    producer.publish(sequence);
  }
  c0.join();
  c1.join();
  producer.drain(5000ms);
  for (int c = 0; c < 2; ++c) {
    BOOST_TEST((got[c][0] == a));
    BOOST_TEST((got[c][1] == b));
  }
}

BOOST_AUTO_TEST_CASE(a_producer_waits_for_the_window_and_says_so_when_a_consumer_stalls) {
  const std::vector<std::string> names{unique_name("stall-0")};
  auto producer = transport::ShmRing::create(names, kWindowedBuffer, 1);
  auto consumer = transport::ShmRing::open(names);
  BOOST_TEST(consumer.join_window());
  const std::size_t window = producer.window_bytes();
  const auto bytes = pattern(2 * window, 3);
  producer.acquire_for_write(1, 50ms);
  // A full window goes in without waiting; the byte after it must wait for the consumer.
  producer.write_through_window(1, 0, bytes.data(), window, window, 50ms, {});
  HOTSWAP_CHECK_THROW_MSG(
      producer.write_through_window(1, window, bytes.data() + window, 1, window, 20ms, {}),
      protocol::TimeoutError, "did not copy chunk 1 out of");
  // A failed worker ends the wait at once, through the check.
  HOTSWAP_CHECK_THROW_MSG(producer.write_through_window(
                              1, window, bytes.data() + window, 1, window, 5000ms,
                              [] { throw protocol::ValueError("the worker refused the round"); }),
                          protocol::ValueError, "the worker refused the round");
  // Once the consumer copied the first piece out, the producer goes on.
  std::vector<std::uint8_t> got(transport::ShmRing::kWindowPieceBytes);
  consumer.read_through_window(1, 0, got.data(), got.size(), window, 50ms);
  BOOST_TEST(std::equal(got.begin(), got.end(), bytes.begin()));
  producer.write_through_window(1, window, bytes.data() + window, 1, window, 50ms, {});
}

BOOST_AUTO_TEST_CASE(the_window_is_refused_where_it_was_not_joined_or_does_not_fit) {
  const std::vector<std::string> names{unique_name("refuse-0")};
  auto producer = transport::ShmRing::create(names, kWindowedBuffer, 1);
  auto consumer = transport::ShmRing::open(names);
  std::vector<std::uint8_t> got(16);
  HOTSWAP_CHECK_THROW_MSG(consumer.read_through_window(1, 0, got.data(), 16, 4096, 20ms),
                          protocol::ValueError, "did not join the window");
  BOOST_TEST(consumer.join_window());
  HOTSWAP_CHECK_THROW_MSG(consumer.check_window(kWindowedBuffer), protocol::ValueError,
                          "does not fit buffers of");
  // The same consumer's handshake repeated on the same buffers joins twice: the count is off,
  // and the producer falls back to whole chunks rather than trust it.
  auto again = transport::ShmRing::open(names);
  BOOST_TEST(again.join_window());
  BOOST_TEST(producer.window_bytes() == 0u);
  // Buffers too small for a window: nobody joins.
  auto small = transport::ShmRing::create({unique_name("refuse-small")}, 4096, 1);
  auto small_consumer = transport::ShmRing::open({unique_name("refuse-small")});
  BOOST_TEST(!small_consumer.join_window());
  BOOST_TEST(small.window_bytes() == 0u);
}

BOOST_AUTO_TEST_CASE(orphans_are_segments_whose_creator_is_gone_zombies_included) {
  const std::string name = unique_name("orphan");
  pid_t child = ::fork();
  if (child == 0) {
    new ShmSegment(ShmSegment::create(name, ShmKind::kWeightArena, 64));
    ::_exit(0);  // no destructor: the segment stays, as after a SIGKILL
  }
  // Not reaped yet: a zombie, which kill(pid, 0) would still call alive.
  while (!exists(name))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  BOOST_TEST(!transport::ProcessIdentity::of(child).alive());
  auto live = ShmSegment::create(unique_name("alive"), ShmKind::kWeightArena, 64);
  auto removed = ShmSegment::remove_orphans();
  BOOST_TEST((std::find(removed.begin(), removed.end(), name) != removed.end()));
  BOOST_TEST(!exists(name));
  BOOST_TEST(exists(live.name()));
  ::waitpid(child, nullptr, 0);
  BOOST_TEST(transport::ProcessIdentity::self().alive());
  // A reused pid is told apart by its start time.
  auto me = transport::ProcessIdentity::self();
  me.start_time += 1;
  BOOST_TEST(!me.alive());
}

BOOST_AUTO_TEST_CASE(a_process_watch_fires_when_its_process_exits) {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  std::atomic<bool> fired{false};
  {
    transport::ProcessWatch watch(transport::ProcessIdentity::of(child), [&] { fired = true; });
    BOOST_TEST(!watch.exited());
    ::kill(child, SIGKILL);
    for (int i = 0; i < 300 && !fired; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    BOOST_TEST(fired.load());
    BOOST_TEST(watch.exited());
  }
  ::waitpid(child, nullptr, 0);
}

BOOST_AUTO_TEST_CASE(posix_errors_name_the_action_the_path_and_errno) {
  try {
    transport::throw_posix_error(ENOENT, "open", "/models/x/model-00002.safetensors");
    BOOST_FAIL("expected a throw");
  } catch (const transport::PosixError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "cannot open /models/x/model-00002.safetensors: No such file or directory");
    BOOST_TEST(e.error() == ENOENT);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(arena_fence)

BOOST_AUTO_TEST_CASE(a_read_sees_the_round_and_any_change_during_it) {
  using transport::ArenaFence;
  alignas(64) std::array<std::uint8_t, 128> area{};
  // Without the magic (an older trainer's arena, or a tensor at offset 0): no fence.
  BOOST_TEST(!ArenaFence::read(area.data(), area.size()).has_value());
  BOOST_TEST(!ArenaFence::check_before(area.data(), area.size(), 3, "/a").has_value());
  ArenaFence::format(area.data());
  BOOST_TEST(!ArenaFence::read(area.data(), 63).has_value());  // too small to hold one
  HOTSWAP_CHECK_THROW_MSG(ArenaFence::check_before(area.data(), area.size(), 3, "/a"),
                          protocol::TransferError,
                          "the shared weight arena /a is released (the trainer may be writing "
                          "it), not for this round (3)");
  std::optional<ArenaFence::Stamp> before;
  {
    transport::FrozenArenaRound frozen(area.data(), 3);
    before = ArenaFence::check_before(area.data(), area.size(), 3, "/a");
    BOOST_REQUIRE(before.has_value());
    BOOST_TEST(before->frozen_round == 3u);
    ArenaFence::check_after(area.data(), area.size(), before, 3, "/a");  // nothing moved
  }
  // Released mid-read (the trainer's round timed out on a late worker), even if it then froze
  // the same round number again: the change counter moved.
  HOTSWAP_CHECK_THROW_MSG(ArenaFence::check_after(area.data(), area.size(), before, 3, "/a"),
                          protocol::TransferError,
                          "the shared weight arena /a changed while this worker read round 3 "
                          "from it (now released");
  ArenaFence::freeze(area.data(), 3);
  HOTSWAP_CHECK_THROW_MSG(ArenaFence::check_after(area.data(), area.size(), before, 3, "/a"),
                          protocol::TransferError, "(now frozen for round 3)");
}

BOOST_AUTO_TEST_SUITE_END()
