// Store opening and hosting decision (see store_open.h).
#include "rdzv/store_open.h"

#include "core/error.h"
#include "core/log.h"
#include "rdzv/etcd_store.h"
#include "rdzv/tcp_store.h"

namespace cadre::rdzv {

OpenedStore store_open(const StoreOptions& o) {
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  OpenedStore out;
  out.endpoint = o.endpoint;
  if (o.standalone) {
    out.store = tcp_store_host("127.0.0.1", 0, timeout, o.secret);
    out.is_host = true;
    out.endpoint = {"127.0.0.1", tcp_store_port(*out.store)};
    return out;
  }
  CADRE_CONFIG_CHECK(o.backend == "c10d" || o.backend == "static" || o.backend == "etcd",
                     "--rdzv-backend must be c10d, static or etcd, got '", o.backend, "'");
  if (o.backend == "etcd") {
    EtcdOptions etcd;
    etcd.endpoints = o.endpoints.empty() ? std::vector<Endpoint>{o.endpoint} : o.endpoints;
    etcd.user = o.user;
    etcd.password = o.password;
    etcd.tls = o.tls;
    etcd.ca_file = o.ca_file;
    etcd.cert_file = o.cert_file;
    etcd.key_file = o.key_file;
    etcd.timeout_s = o.timeout_s;
    etcd.request_timeout_s = std::min(5.0, o.timeout_s);
    out.store = etcd_store_open(etcd, o.session_ttl_s);
    out.endpoint = etcd.endpoints.front();
    log::info(str("rendezvous: using ", out.store->describe(), " (session lease ", o.session_ttl_s, " s)"));
    return out;
  }
  CADRE_CHECK(!o.secret.empty(), "the embedded rendezvous store needs the job secret");
  bool host;
  if (o.backend == "static" || o.node_rank >= 0) {
    host = o.node_rank == 0;
  } else {
    // Whoever binds the port first on the endpoint's machine hosts; a lost race means connect.
    host = host_is_local(o.endpoint.host) && port_is_free(o.endpoint.host, o.endpoint.port);
  }
  if (host && (o.backend == "static" || o.node_rank >= 0)) {
    CADRE_CHECK(port_is_free(o.endpoint.host, o.endpoint.port), "cannot host the rendezvous store on ",
                o.endpoint.str(), ": the port is already in use (another job or program listens there; pick a "
                "free port with --rdzv-endpoint)");
  }
  if (host) {
    try {
      out.store = tcp_store_host(o.endpoint.host, o.endpoint.port, timeout, o.secret);
      out.is_host = true;
      log::info(str("rendezvous: hosting the store on ", o.endpoint.str()));
      return out;
    } catch (const Error& e) {
      // c10d: another agent on this machine may have bound it a moment before us.
      if (o.backend == "static" || o.node_rank >= 0 || port_is_free(o.endpoint.host, o.endpoint.port)) throw;
      log::info(str("rendezvous: ", o.endpoint.str(), " was taken meanwhile; connecting as a client"));
    }
  }
  out.store = tcp_store_connect(o.endpoint.host, o.endpoint.port, timeout, o.secret);
  return out;
}

}  // namespace cadre::rdzv
