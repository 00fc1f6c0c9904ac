// Mutual authentication on the job token without ever sending it (docs/rendezvous.md, "Threat
// model"), for the TCP store's and the TCP mesh's handshakes. Each side sends a fresh random
// nonce; each proves that it knows the token with HMAC-SHA256 (OpenSSL's libcrypto) keyed with
// the token, over its role, the job id, what the connection is for (the binding: ranks and
// world size) and both nonces. Fresh nonces on both sides make a recorded exchange useless on
// any other connection (replay); the role inside the MAC makes one side's proof useless as the
// other side's (reflection). The responder proves itself first, and the initiator answers only
// after checking that proof, so a process reveals its proof only to a peer that holds the token.
// Over TLS (--tls) the proofs also cover the channel: a value both ends of one TLS session
// derive from its handshake (RFC 5705 keying material exporter). A relay that terminates TLS
// separately with each side has two sessions with two different values, so the proofs it
// passes on do not verify: the token authenticates the TLS channel itself, without a CA.
// Pure functions (and the CSPRNG); thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gradsync::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

// The roles, one per side of each handshake.
inline constexpr std::string_view kStoreServer = "gradsync store server";
inline constexpr std::string_view kStoreClient = "gradsync store client";
inline constexpr std::string_view kMeshAcceptor = "gradsync mesh acceptor";
inline constexpr std::string_view kMeshConnector = "gradsync mesh connector";

// What both sides of one connection agree on. Views: the strings must outlive the Exchange.
struct Exchange {
  std::string_view jobId;
  std::string_view binding;  // e.g. the ranks the connection joins; "" for the store
  Nonce initiator{};         // the connecting side's nonce
  Nonce responder{};         // the accepting side's
  // What identifies the secure channel the exchange runs over (the TLS exporter value); empty
  // for a plaintext connection, whose proofs are then exactly those of protocol version 2.
  std::string_view channel;
};

// A nonce from OpenSSL's CSPRNG; throws InternalError if it has no entropy.
Nonce freshNonce();
// The proof that the side playing `role` knows `token`.
Proof prove(std::string_view token, std::string_view role, const Exchange& exchange);
// Whether `proof` is that of `role` for `token` (compared in constant time).
bool verify(std::string_view token, std::string_view role, const Exchange& exchange,
            const Proof& proof);

}  // namespace gradsync::auth
