"""Kafka's SslPrincipalMapperTest cases, and subject names as Java's X500Principal writes them."""

from __future__ import annotations

import pytest

from proxy.security.tls import PrincipalMapper, TlsConfigError, subject_name


@pytest.mark.parametrize("rules", [
    "DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U", "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/", "", ",   , , ,      , , ,   "])
def test_valid_rules(rules: str) -> None:
    PrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(TlsConfigError):
        PrincipalMapper(rules)


def test_mapping_like_kafka() -> None:
    mapper = PrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L", "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U", "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT").name(
        "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"
    assert PrincipalMapper("RULE:^CN=(.*)$/$1-$2\\$/").name("CN=x") == "x-$2$"  # $2: no such group, kept
    assert PrincipalMapper("RULE:^OU=(.*)$/$1/").name("CN=x") is None  # no rule applies


def test_subject_names_are_rfc2253_most_specific_first() -> None:
    certificate = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
                               (("organizationalUnitName", "eng"), ("userId", "7")), (("commonName", " alice#"),))}
    assert subject_name(certificate) == "CN=\\ alice#,OU=eng+UID=7,O=Acme\\, Inc.,C=US"
    assert PrincipalMapper("RULE:^CN=(.*?),OU=.*$/$1/L").name("CN=Alice,OU=eng,O=Acme,C=US") == "alice"
