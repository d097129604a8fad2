// SPDX-License-Identifier: Apache-2.0
/// @file result.h
/// grex::Result<T> and grex::Error: how every setup call in grex reports failure.
///
/// Nothing in libgrex throws. Setup calls return `Result<T>`; an `Error`
/// carries a code and a message that names where it happened (rank, peer,
/// device), the cause and, where one exists, a hint on what to do:
///
///   shm: rank 1 -> peer 3 (shm): peer process 4711 exited; hint: look at rank 3's log
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace grex {

/// Error categories; stable across releases (the C API maps them 1:1).
enum class Errc : int32_t {
  kOk = 0,
  kInvalidArgument = 1,   ///< a caller-supplied value is out of range or malformed
  kNotSupported = 2,      ///< the backend or device does not offer this operation
  kTimeout = 3,           ///< a wait ran past its deadline
  kPeerFailed = 4,        ///< a remote rank died or reported an error
  kConnectionFailed = 5,  ///< could not reach or keep a connection
  kAuthFailed = 6,        ///< job token mismatch or missing
  kAddressInUse = 7,      ///< a listening port is taken
  kNoMemory = 8,          ///< allocation or registration ran out of memory
  kSystem = 9,            ///< an OS call failed (errno in the message)
  kProtocol = 10,         ///< a peer sent something malformed
  kMismatch = 11,         ///< ranks disagree (count, dtype, op, world size)
  kNotFound = 12,         ///< a named driver, device, key or region does not exist
  kInternal = 13,         ///< a grex bug; please report
};

/// Short stable name of an error code ("timeout", "peer-failed", ...).
std::string_view errc_name(Errc code) noexcept;

/// An error: code, cause and optional context. Cheap to move; built with
/// chained setters: `Error(Errc::kTimeout, "no reply").rank(1).peer(3).hint("...")`.
class Error {
 public:
  Error() = default;
  Error(Errc code, std::string cause) : code_(code), cause_(std::move(cause)) {}

  /// Builds an error from errno: cause is "<what>: <strerror(err)>".
  static Error from_errno(std::string_view what, int err);

  Error& rank(int r) & { rank_ = r; return *this; }
  Error& peer(int p) & { peer_ = p; return *this; }
  Error& device(std::string d) & { device_ = std::move(d); return *this; }
  Error& hint(std::string h) & { hint_ = std::move(h); return *this; }
  Error&& rank(int r) && { rank_ = r; return std::move(*this); }
  Error&& peer(int p) && { peer_ = p; return std::move(*this); }
  Error&& device(std::string d) && { device_ = std::move(d); return std::move(*this); }
  Error&& hint(std::string h) && { hint_ = std::move(h); return std::move(*this); }

  Errc code() const noexcept { return code_; }
  const std::string& cause() const noexcept { return cause_; }
  int rank_or(int fallback) const noexcept { return rank_ >= 0 ? rank_ : fallback; }
  int peer_rank() const noexcept { return peer_; }
  const std::string& device_name() const noexcept { return device_; }
  const std::string& hint_text() const noexcept { return hint_; }

  /// Adds context in front of the cause ("allreduce: " + cause), keeping the code.
  Error&& context(std::string_view what) &&;

  /// The full message: "<device>: rank R -> peer P: <cause>; hint: <hint>".
  std::string message() const;

 private:
  Errc code_ = Errc::kInternal;
  std::string cause_;
  std::string device_;
  std::string hint_;
  int rank_ = -1;
  int peer_ = -1;
};

/// Either a value of type T or an Error. Like C++23 std::expected, minus exceptions.
template <class T>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  Result(const T& v) : ok_(true) { new (&value_) T(v); }                 // NOLINT
  Result(T&& v) : ok_(true) { new (&value_) T(std::move(v)); }            // NOLINT
  Result(Error e) : ok_(false) { new (&error_) Error(std::move(e)); }     // NOLINT
  template <class U, class = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                              !std::is_same_v<std::decay_t<U>, T> &&
                                              !std::is_same_v<std::decay_t<U>, Error>>>
  Result(U&& v) : ok_(true) { new (&value_) T(std::forward<U>(v)); }      // NOLINT
  Result(const Result& o) requires std::is_copy_constructible_v<T> : ok_(o.ok_) {
    if (ok_) new (&value_) T(o.value_); else new (&error_) Error(o.error_);
  }
  Result(Result&& o) noexcept : ok_(o.ok_) {
    if (ok_) new (&value_) T(std::move(o.value_)); else new (&error_) Error(std::move(o.error_));
  }
  Result& operator=(Result&& o) noexcept {
    if (this == &o) return *this;
    destroy();
    ok_ = o.ok_;
    if (ok_) new (&value_) T(std::move(o.value_)); else new (&error_) Error(std::move(o.error_));
    return *this;
  }
  ~Result() { destroy(); }

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }

  T& value() & { return value_; }
  const T& value() const& { return value_; }
  T&& value() && { return std::move(value_); }
  T& operator*() & { return value_; }
  const T& operator*() const& { return value_; }
  T&& operator*() && { return std::move(value_); }
  T* operator->() { return &value_; }
  const T* operator->() const { return &value_; }

  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

  T value_or(T fallback) const& { return ok_ ? value_ : std::move(fallback); }

 private:
  void destroy() noexcept {
    if (ok_) value_.~T(); else error_.~Error();
  }
  bool ok_;
  union {
    T value_;
    Error error_;
  };
};

/// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  using value_type = void;
  Result() = default;
  Result(Error e) : ok_(false), error_(std::move(e)) {}  // NOLINT
  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  void value() const noexcept {}
  void operator*() const noexcept {}
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  bool ok_ = true;
  Error error_;
};

/// The success value of Result<void>, for `return ok();`.
inline Result<void> ok() { return {}; }

namespace detail {
template <class T>
T take(Result<T>&& r) { return std::move(r).value(); }
inline void take(Result<void>&&) {}
}  // namespace detail

}  // namespace grex

/// Evaluates a Result-returning expression; on error returns the error from
/// the enclosing function, otherwise yields the value (GNU statement expression).
#define GREX_TRY(expr)                                           \
  ({                                                             \
    auto grex_try_result_ = (expr);                              \
    if (!grex_try_result_.ok())                                  \
      return std::move(grex_try_result_).error();                \
    ::grex::detail::take(std::move(grex_try_result_));           \
  })

/// Like GREX_TRY, but prefixes the error's cause with `what` on failure.
#define GREX_TRY_CTX(expr, what)                                 \
  ({                                                             \
    auto grex_try_result_ = (expr);                              \
    if (!grex_try_result_.ok())                                  \
      return std::move(grex_try_result_).error().context(what);  \
    ::grex::detail::take(std::move(grex_try_result_));           \
  })
