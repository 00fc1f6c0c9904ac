#include "data/http_get.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>

#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr const char* kFetchOperation = "fetch from the data server";

size_t append(char* data, size_t size, size_t count, void* user) {
  auto* out = static_cast<std::vector<uint8_t>*>(user);
  out->insert(out->end(), data, data + size * count);
  return size * count;
}

void initCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// "http://host:port" of `url`: what errors name as the server.
std::string serverOf(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t hostStart = scheme == std::string::npos ? 0 : scheme + 3;
  return url.substr(0, url.find('/', hostStart));
}

[[noreturn]] void failGet(const std::string& url, const std::string& problem) {
  throw DataError(fmt::format("GET {}: {}", url, problem), {.operation = kFetchOperation});
}

}  // namespace

std::vector<uint8_t> httpGet(const std::string& url, const HttpGetOptions& options) {
  initCurlOnce();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) failGet(url, "cannot create a libcurl handle");
  std::vector<uint8_t> body;
  char error[CURL_ERROR_SIZE] = {};
  CURL* h = curl.get();
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM from a worker thread
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options.connectTimeoutSeconds * 1000));
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(options.stallSeconds));
  const CURLcode rc = curl_easy_perform(h);
  if (rc != CURLE_OK) {
    const std::string detail = error[0] != '\0' ? error : curl_easy_strerror(rc);
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING ||
        rc == CURLE_PARTIAL_FILE) {
      failGet(url, fmt::format("cannot reach the data server at {} ({}); is it running?",
                               serverOf(url), detail));
    }
    failGet(url, detail);
  }
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) failGet(url, fmt::format("HTTP {} from {}", status, serverOf(url)));
  return body;
}

}  // namespace gradsync
