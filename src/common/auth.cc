#include "common/auth.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <string>

#include "gradsync/error.h"

namespace gradsync::auth {

Nonce freshNonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw InternalError("OpenSSL's random generator failed to make a nonce");
  }
  return nonce;
}

// HMAC-SHA256 keyed with the token over role | 0 | job id | 0 | binding | 0 | both nonces |
// channel: the separators keep fields from sliding into each other ("ab"+"c" against "a"+"bc");
// the nonces have a fixed length, so the channel, last, needs none (and an empty one leaves the
// plaintext message as it always was).
Proof prove(std::string_view token, std::string_view role, const Exchange& exchange) {
  std::string message;
  message.reserve(role.size() + exchange.jobId.size() + exchange.binding.size() + 3 +
                  2 * kNonceBytes + exchange.channel.size());
  message.append(role).push_back('\0');
  message.append(exchange.jobId).push_back('\0');
  message.append(exchange.binding).push_back('\0');
  message.append(exchange.initiator.begin(), exchange.initiator.end());
  message.append(exchange.responder.begin(), exchange.responder.end());
  message.append(exchange.channel);
  Proof proof{};
  unsigned int length = 0;
  // An empty key is still a key: HMAC pads it (a process alone needs no token, and a job's
  // processes all have one).
  static const unsigned char kEmpty = 0;
  const auto* key = token.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(token.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), proof.data(),
           &length) == nullptr ||
      length != proof.size()) {
    throw InternalError("OpenSSL's HMAC-SHA256 failed");
  }
  return proof;
}

bool verify(std::string_view token, std::string_view role, const Exchange& exchange,
            const Proof& proof) {
  const Proof expected = prove(token, role, exchange);
  return CRYPTO_memcmp(expected.data(), proof.data(), proof.size()) == 0;
}

}  // namespace gradsync::auth
