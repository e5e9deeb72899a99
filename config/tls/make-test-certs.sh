#!/bin/sh
# Certificates for a TLS test setup of Odradek (or Kafka): a CA, a broker certificate and a client
# certificate, as PEM files the brokers and clients read directly (ssl.keystore.type=PEM).
#
#   config/tls/make-test-certs.sh [DIR] [BROKER_HOST]     # default: ./certs, localhost
#
# Writes to DIR:
#   ca.pem                  the CA certificate: every truststore (ssl.truststore.location, ssl.ca.location)
#   broker-keystore.pem     the broker's private key + certificate (ssl.keystore.location), valid for
#                           BROKER_HOST, localhost and 127.0.0.1 (clients check the host name)
#   client.crt, client.key  a client certificate (CN=alice,OU=Clients) for ssl.client.auth=required
#   client-keystore.pem     the same as one file, for Java clients (ssl.keystore.location)
# For tests only: the CA key (ca.key) sits next to the certificates and nothing is encrypted.
set -eu
DIR=${1:-certs}
HOST=${2:-localhost}
mkdir -p "$DIR"
cd "$DIR"
openssl req -x509 -newkey rsa:2048 -noenc -keyout ca.key -out ca.pem -days 365 -subj "/O=Odradek Test/CN=Test CA" 2>/dev/null

openssl req -newkey rsa:2048 -noenc -keyout broker.key -out broker.csr -subj "/O=Odradek Test/OU=Brokers/CN=$HOST" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' "$HOST" > broker.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 -extfile broker.ext -out broker.crt 2>/dev/null
cat broker.key broker.crt > broker-keystore.pem

openssl req -newkey rsa:2048 -noenc -keyout client.key -out client.csr -subj "/O=Odradek Test/OU=Clients/CN=alice" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 -extfile client.ext -out client.crt 2>/dev/null
cat client.key client.crt > client-keystore.pem

rm -f broker.csr broker.ext client.csr client.ext
echo "certificates for $HOST in $(pwd)"
