// The Mailbox (src/transport/mailbox.h) every transport matches messages with: messages that
// arrive before their receive, receives posted before their message, and a message abandoned
// half-arrived (its peer lost), whose receive must fail whenever it is posted, never wait.
#include "transport/mailbox.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "gradsync/error.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

std::exception_ptr lost() {
  return std::make_exception_ptr(PeerLostError("rank 1 was lost", {.rank = 0, .peer = 1}));
}

TEST(Mailbox, AnEarlyMessageIsCopiedWhenItsReceiveIsPosted) {
  Mailbox mailbox(0, 1s);
  const std::vector<uint8_t> sent{1, 2, 3};
  mailbox.deliver(1, 7, sent.data(), sent.size());
  std::vector<uint8_t> got(3);
  WorkPtr work = mailbox.postRecv(1, 7, got.data(), got.size());
  work->wait();
  EXPECT_EQ(got, sent);
}

TEST(Mailbox, APostedReceiveTakesTheMessageStraightIn) {
  Mailbox mailbox(0, 1s);
  std::vector<uint8_t> got(2);
  WorkPtr work = mailbox.postRecv(1, 7, got.data(), got.size());
  Mailbox::Delivery delivery = mailbox.beginDelivery(1, 7, 2);
  EXPECT_EQ(delivery.dest, got.data());
  std::memset(delivery.dest, 9, 2);
  mailbox.endDelivery(delivery);
  work->wait();
  EXPECT_EQ(got, (std::vector<uint8_t>{9, 9}));
}

TEST(Mailbox, AReceivePostedWhileItsMessageArrivesWaitsForTheRest) {
  Mailbox mailbox(0, 1s);
  Mailbox::Delivery delivery = mailbox.beginDelivery(1, 7, 2);
  std::vector<uint8_t> got(2);
  WorkPtr work = mailbox.postRecv(1, 7, got.data(), got.size());
  EXPECT_FALSE(work->done());
  std::memset(delivery.dest, 5, 2);
  mailbox.endDelivery(delivery);
  work->wait();
  EXPECT_EQ(got, (std::vector<uint8_t>{5, 5}));
}

// The race the chaos trials found (tests/multiproc): the transport abandons a half-arrived
// message, and the receive for it is posted before the transport fails the whole mailbox.
TEST(Mailbox, AReceivePostedForAnAbandonedMessageFailsAtOnce) {
  Mailbox mailbox(0, 60s);
  Mailbox::Delivery delivery = mailbox.beginDelivery(1, 7, 1 << 20);
  mailbox.abandonDelivery(delivery, lost());
  std::vector<uint8_t> got(1 << 20);
  WorkPtr work = mailbox.postRecv(1, 7, got.data(), got.size());
  ASSERT_TRUE(work->done());
  EXPECT_THROW(work->wait(), PeerLostError);
}

TEST(Mailbox, AReceiveWaitingOnAnAbandonedMessageFails) {
  Mailbox mailbox(0, 60s);
  Mailbox::Delivery delivery = mailbox.beginDelivery(1, 7, 4);
  std::vector<uint8_t> got(4);
  WorkPtr work = mailbox.postRecv(1, 7, got.data(), got.size());
  mailbox.abandonDelivery(delivery, lost());
  EXPECT_THROW(work->wait(), PeerLostError);
}

TEST(Mailbox, FailAllFailsPostedAndLaterReceives) {
  Mailbox mailbox(0, 60s);
  std::vector<uint8_t> got(4);
  WorkPtr posted = mailbox.postRecv(1, 7, got.data(), got.size());
  mailbox.failAll(lost());
  EXPECT_THROW(posted->wait(), PeerLostError);
  EXPECT_THROW(mailbox.postRecv(2, 7, got.data(), got.size())->wait(), PeerLostError);
}

}  // namespace
}  // namespace gradsync
