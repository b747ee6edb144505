import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.SecurityUtils;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizableRequestContext;
import org.apache.kafka.server.authorizer.AuthorizationResult;

/**
 * Apache Kafka's own StandardAuthorizer deciding what it is asked on standard input, one line each, fields split by
 * tabs; enums by their codes:
 *   config  super.users  allow.everyone.if.no.acl.found      a new authorizer, with no ACL yet
 *   acl     resourceType name patternType principal host operation permission
 *   ask     principal host operation resourceType name       prints ALLOWED or DENIED
 *   bytype  principal host operation resourceType            authorizeByResourceType: ALLOWED or DENIED
 *
 * Run by tests/integration/test_acls.py with Java's source launcher: java -cp 'lib/*' AuthorizerDecisions.java
 */
public final class AuthorizerDecisions {
    public static void main(String[] args) throws Exception {
        StandardAuthorizer authorizer = null;
        Map<Uuid, StandardAcl> acls = new HashMap<>();
        boolean loaded = false;
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder output = new StringBuilder();
        for (String line = input.readLine(); line != null; line = input.readLine()) {
            String[] f = line.split("\t", -1);
            switch (f[0]) {
                case "config":
                    authorizer = new StandardAuthorizer();
                    authorizer.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of()));
                    acls.clear();
                    loaded = false;
                    authorizer.configure(Map.of(StandardAuthorizer.SUPER_USERS_CONFIG, f[1],
                        StandardAuthorizer.ALLOW_EVERYONE_IF_NO_ACL_IS_FOUND_CONFIG, f[2]));
                    break;
                case "acl":
                    acls.put(Uuid.randomUuid(), new StandardAcl(ResourceType.fromCode(Byte.parseByte(f[1])), f[2],
                        PatternType.fromCode(Byte.parseByte(f[3])), f[4], f[5],
                        AclOperation.fromCode(Byte.parseByte(f[6])), AclPermissionType.fromCode(Byte.parseByte(f[7]))));
                    break;
                case "ask":
                case "bytype":
                    if (!loaded) {
                        authorizer.loadSnapshot(acls);
                        authorizer.completeInitialLoad();
                        loaded = true;
                    }
                    AuthorizableRequestContext context = context(SecurityUtils.parseKafkaPrincipal(f[1]),
                        InetAddress.getByName(f[2]));
                    AclOperation operation = AclOperation.fromCode(Byte.parseByte(f[3]));
                    ResourceType type = ResourceType.fromCode(Byte.parseByte(f[4]));
                    AuthorizationResult result = f[0].equals("ask")
                        ? authorizer.authorize(context, List.of(new Action(operation,
                            new ResourcePattern(type, f[5], PatternType.LITERAL), 1, false, false))).get(0)
                        : authorizer.authorizeByResourceType(context, operation, type);
                    output.append(result).append('\n');
                    break;
                default:
                    throw new IllegalArgumentException("unknown line: " + line);
            }
        }
        System.out.print(output);
    }

    private static AuthorizableRequestContext context(KafkaPrincipal principal, InetAddress address) {
        return new AuthorizableRequestContext() {
            public String listenerName() { return "PLAINTEXT"; }
            public SecurityProtocol securityProtocol() { return SecurityProtocol.PLAINTEXT; }
            public KafkaPrincipal principal() { return principal; }
            public InetAddress clientAddress() { return address; }
            public int requestType() { return 0; }
            public int requestVersion() { return 0; }
            public String clientId() { return "decisions"; }
            public int correlationId() { return 0; }
        };
    }
}
