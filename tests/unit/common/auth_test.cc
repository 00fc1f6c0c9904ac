// common/auth: the proofs bind role, job, binding, both nonces and, over TLS, the channel.
#include "common/auth.h"

#include <gtest/gtest.h>

#include <string>

namespace gradsync::auth {
namespace {

Exchange exchangeOver(std::string_view channel) {
  static const Nonce kInitiator = freshNonce();
  static const Nonce kResponder = freshNonce();
  return {.jobId = "job",
          .binding = "1>0/2",
          .initiator = kInitiator,
          .responder = kResponder,
          .channel = channel};
}

TEST(Auth, ProofVerifiesForItsOwnRoleAndToken) {
  const Exchange exchange = exchangeOver("");
  const Proof proof = prove("token", kMeshConnector, exchange);
  EXPECT_TRUE(verify("token", kMeshConnector, exchange, proof));
  EXPECT_FALSE(verify("other", kMeshConnector, exchange, proof));
  EXPECT_FALSE(verify("token", kMeshAcceptor, exchange, proof));  // no reflection
}

// A relay terminating TLS on each side has two channels: the proof one side computed over its
// channel must not verify over the other's.
TEST(Auth, ProofOverOneChannelDoesNotVerifyOverAnother) {
  const std::string one(32, 'a');
  std::string two = one;
  two.back() = 'b';
  const Proof proof = prove("token", kMeshAcceptor, exchangeOver(one));
  EXPECT_TRUE(verify("token", kMeshAcceptor, exchangeOver(one), proof));
  EXPECT_FALSE(verify("token", kMeshAcceptor, exchangeOver(two), proof));
  EXPECT_FALSE(verify("token", kMeshAcceptor, exchangeOver(""), proof));  // TLS stripped
}

// Plaintext proofs (no channel) stay those of protocol version 2: nothing appended.
TEST(Auth, EmptyChannelKeepsThePlaintextProof) {
  const Exchange plain = exchangeOver("");
  const Proof proof = prove("token", kStoreClient, plain);
  EXPECT_EQ(proof, prove("token", kStoreClient, plain));
  EXPECT_NE(proof, prove("token", kStoreClient, exchangeOver(std::string(1, '\0'))));
}

}  // namespace
}  // namespace gradsync::auth
