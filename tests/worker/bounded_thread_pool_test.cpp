#include "worker/frontends/bounded_thread_pool.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>

using hotswap::worker::BoundedThreadPool;

BOOST_AUTO_TEST_SUITE(bounded_thread_pool)

BOOST_AUTO_TEST_CASE(a_full_queue_refuses_instead_of_growing) {
  BoundedThreadPool pool(1, 2);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> started;
  std::atomic<int> ran{0};
  std::function<void()> blocker = [&, released] {
    started.set_value();
    released.wait();
    ++ran;
  };
  BOOST_REQUIRE(pool.try_submit(blocker));
  started.get_future().wait();  // the one thread is busy from here on
  std::function<void()> count = [&] { ++ran; };
  for (int i = 0; i < 2; ++i) {
    std::function<void()> task = count;
    BOOST_TEST(pool.try_submit(task));
  }
  std::function<void()> refused = count;
  BOOST_TEST(!pool.try_submit(refused));
  BOOST_TEST(static_cast<bool>(refused));  // not taken: the caller still holds it
  release.set_value();
  pool.stop();  // runs what was queued, then joins
  BOOST_TEST(ran == 3);
  std::function<void()> late = count;
  BOOST_TEST(!pool.try_submit(late));
}

BOOST_AUTO_TEST_SUITE_END()
