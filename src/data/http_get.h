// One blocking HTTP GET of a whole resource into memory (libcurl): the remote store's client.
//
// Thread-safe: every call uses its own handle (libcurl's global setup runs once, on first use).
// Failures throw DataError naming the URL and what went wrong: the server unreachable or gone
// mid-transfer ("cannot reach the data server at http://10.0.0.1:8080"), an HTTP status other
// than 200 ("HTTP 404"), or no progress for `timeoutSeconds` (a stalled server).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct HttpGetOptions {
  double connectTimeoutSeconds = 10;
  // The transfer fails when it moves fewer than 1 KiB/s for this long (a stalled server); a
  // slow but live link is never cut.
  double stallSeconds = 30;
};

std::vector<uint8_t> httpGet(const std::string& url, const HttpGetOptions& options = {});

}  // namespace gradsync
