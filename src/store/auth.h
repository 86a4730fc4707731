// Proofs of the job secret for the store handshake (wire.h): HMAC-SHA256 over a role and both
// sides' fresh nonces, so a proof cannot be replayed on another connection or reflected back
// by a fake peer, and the secret never crosses the wire.
#pragma once

#include <string>

namespace cadre::store {

enum class Role { Client, Server };

// `n` bytes from the kernel's CSPRNG (getrandom).
std::string random_bytes(size_t n);

// HMAC-SHA256(secret, "cadre-store-v1 <role>" | first_nonce | second_nonce): the client signs
// (server nonce, client nonce), the server (client nonce, server nonce).
std::string auth_proof(const std::string& secret, Role role, const std::string& first_nonce,
                       const std::string& second_nonce);

// Constant-time comparison (a timing difference must not reveal how much of a proof matched).
bool proofs_equal(const std::string& a, const std::string& b);

}  // namespace cadre::store
