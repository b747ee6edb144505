import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.internal.config.Features;
import java.nio.file.Files;
import java.nio.file.Path;

/** Kroxylicious's proxy from its runtime jar, configured by the YAML file named by the first argument
 * (Maven Central serves kroxylicious-runtime but not the kroxylicious-app that would wrap it). */
public final class KroxyliciousPassThrough {
    public static void main(String[] args) throws Exception {
        ConfigParser parser = new ConfigParser();
        try (KafkaProxy proxy = new KafkaProxy(parser, parser.parseConfiguration(Files.readString(Path.of(args[0]))),
                Features.defaultFeatures())) {
            proxy.startup();
            System.out.println("started");
            System.out.flush();
            proxy.block();
        }
    }
}
